// hepix_seal: secret-key (symmetric) CKKS encryption with SEAL's seeded serialisation.
//
// Pyfhel 3.5 exposes public-key encryption only.  This module links the very SEAL 4.1 library
// the installed Pyfhel wheel ships (libseal-4.1.a, configured with the same options), loads the
// context and secret key bytes Pyfhel writes, and encrypts whole batches of slot vectors with
// Encryptor(context, secret_key).encrypt_symmetric(...).  The result of encrypt_symmetric is
// SEAL's Serializable<Ciphertext>: its second component is stored as the seed it is expanded
// from, so the bytes are about half a ciphertext.  SEAL expands the seed when the bytes are
// loaded, so Pyfhel (PyCtxt from bytes) reads them like any other ciphertext.
//
// The batch loops run without the GIL.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cmath>
#include <complex>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "seal/seal.h"

namespace py = pybind11;

#ifndef HEPIX_BUILD_KEY
#define HEPIX_BUILD_KEY "unknown"
#endif

namespace
{
    const seal::seal_byte *as_seal_bytes(const std::string_view &s)
    {
        return reinterpret_cast<const seal::seal_byte *>(s.data());
    }

    seal::compr_mode_type compression_from(const std::string &name)
    {
        if (name == "none")
            return seal::compr_mode_type::none;
        if (name == "zstd")
        {
#ifdef SEAL_USE_ZSTD
            return seal::compr_mode_type::zstd;
#else
            throw std::invalid_argument("this SEAL build has no zstd support; use compression 'none'");
#endif
        }
        if (name == "zlib")
        {
#ifdef SEAL_USE_ZLIB
            return seal::compr_mode_type::zlib;
#else
            throw std::invalid_argument("this SEAL build has no zlib support; use compression 'none'");
#endif
        }
        throw std::invalid_argument("unknown compression '" + name + "'; use one of none, zstd, zlib");
    }

    class SymmetricEncryptor
    {
    public:
        SymmetricEncryptor(
            py::bytes context, py::bytes secret_key, double scale, const std::string &compression, int security_bits)
            : scale_(scale), compression_(compression_from(compression)), compression_name_(compression)
        {
            if (!(scale > 0.0))
                throw std::invalid_argument("scale must be positive, got " + std::to_string(scale));
            std::string_view ctx_bytes = context;
            std::string_view key_bytes = secret_key;
            seal::EncryptionParameters parms;
            try
            {
                parms.load(as_seal_bytes(ctx_bytes), ctx_bytes.size());
            }
            catch (const std::exception &e)
            {
                throw std::invalid_argument(std::string("the context bytes are not a serialized SEAL context: ") + e.what());
            }
            if (parms.scheme() != seal::scheme_type::ckks)
                throw std::invalid_argument("symmetric encryption is implemented for CKKS contexts only");
            seal::sec_level_type level;
            switch (security_bits)
            {
            case 128:
                level = seal::sec_level_type::tc128;
                break;
            case 192:
                level = seal::sec_level_type::tc192;
                break;
            case 256:
                level = seal::sec_level_type::tc256;
                break;
            default:
                throw std::invalid_argument(
                    "security_bits must be 128, 192 or 256, got " + std::to_string(security_bits));
            }
            context_ = std::make_unique<seal::SEALContext>(parms, true, level);
            if (!context_->parameters_set())
                throw std::invalid_argument(
                    "the context's parameters are not valid at " + std::to_string(security_bits) + "-bit security: " +
                    context_->parameter_error_message());
            if (key_bytes.empty())
                throw std::invalid_argument("the secret key bytes are empty");
            try
            {
                secret_key_.load(*context_, as_seal_bytes(key_bytes), key_bytes.size());
            }
            catch (const std::exception &e)
            {
                throw std::invalid_argument(
                    std::string("the secret key bytes do not load as a secret key of this context: ") + e.what());
            }
            encoder_ = std::make_unique<seal::CKKSEncoder>(*context_);
            encryptor_ = std::make_unique<seal::Encryptor>(*context_, secret_key_);
            auto &first = *context_->first_context_data();
            const double top = static_cast<double>(first.total_coeff_modulus_bit_count());
            if (std::log2(scale) >= top)
                throw std::invalid_argument("scale does not fit the coefficient modulus");
        }

        std::size_t slots() const
        {
            return encoder_->slot_count();
        }

        std::size_t poly_modulus_degree() const
        {
            return context_->first_context_data()->parms().poly_modulus_degree();
        }

        double scale() const
        {
            return scale_;
        }

        std::string compression() const
        {
            return compression_name_;
        }

        template <typename T>
        py::list encrypt(py::array_t<T, py::array::c_style | py::array::forcecast> values)
        {
            if (values.ndim() != 1 && values.ndim() != 2)
                throw std::invalid_argument(
                    "values must be a 1-D slot vector or a 2-D batch (one row per ciphertext), got " +
                    std::to_string(values.ndim()) + " dimensions");
            const std::size_t rows = values.ndim() == 2 ? static_cast<std::size_t>(values.shape(0)) : 1;
            const std::size_t width = static_cast<std::size_t>(values.shape(values.ndim() - 1));
            if (width > slots())
                throw std::invalid_argument(
                    "a row of " + std::to_string(width) + " values does not fit the " + std::to_string(slots()) +
                    " slots of a ciphertext");
            const T *data = values.data();
            std::vector<std::vector<seal::seal_byte>> out(rows);
            std::string error;
            {
                py::gil_scoped_release nogil;
                seal::Plaintext plain;
                try
                {
                    for (std::size_t r = 0; r < rows; r++)
                    {
                        gsl::span<const T> row(data + r * width, width);
                        encoder_->encode(row, scale_, plain);
                        auto ct = encryptor_->encrypt_symmetric(plain);
                        auto &buf = out[r];
                        buf.resize(static_cast<std::size_t>(ct.save_size(compression_)));
                        auto used = ct.save(buf.data(), buf.size(), compression_);
                        buf.resize(static_cast<std::size_t>(used));
                    }
                }
                catch (const std::exception &e)
                {
                    error = e.what();
                }
            }
            if (!error.empty())
                throw std::invalid_argument("SEAL refused to encode or encrypt the values: " + error);
            py::list result(rows);
            for (std::size_t r = 0; r < rows; r++)
            {
                result[r] = py::bytes(reinterpret_cast<const char *>(out[r].data()), out[r].size());
                std::vector<seal::seal_byte>().swap(out[r]);
            }
            return result;
        }

    private:
        double scale_;
        seal::compr_mode_type compression_;
        std::string compression_name_;
        std::unique_ptr<seal::SEALContext> context_;
        seal::SecretKey secret_key_;
        std::unique_ptr<seal::CKKSEncoder> encoder_;
        std::unique_ptr<seal::Encryptor> encryptor_;
    };
} // namespace

PYBIND11_MODULE(hepix_seal, m)
{
    m.doc() = "Secret-key (symmetric) CKKS encryption with seeded serialisation, on the SEAL library Pyfhel ships";
    m.attr("SEAL_VERSION") = SEAL_VERSION;
    m.attr("BUILD_KEY") = HEPIX_BUILD_KEY;

    py::class_<SymmetricEncryptor>(m, "SymmetricEncryptor")
        .def(
            py::init<py::bytes, py::bytes, double, const std::string &, int>(), py::arg("context"),
            py::arg("secret_key"), py::arg("scale"), py::arg("compression") = "none", py::arg("security_bits") = 128,
            "context: SEAL EncryptionParameters bytes (the SEAL part of Pyfhel's to_bytes_context, after "
            "Pyfhel's own prefix); secret_key: SEAL SecretKey bytes (Pyfhel to_bytes_secret_key); scale: the CKKS "
            "encoding scale; compression: none | zstd | zlib; security_bits: the context's security level")
        .def_property_readonly("slots", &SymmetricEncryptor::slots)
        .def_property_readonly("n", &SymmetricEncryptor::poly_modulus_degree)
        .def_property_readonly("scale", &SymmetricEncryptor::scale)
        .def_property_readonly("compression", &SymmetricEncryptor::compression)
        .def(
            "encrypt_real", &SymmetricEncryptor::encrypt<double>, py::arg("values"),
            "Encrypt each row of a float64 (rows, k <= slots) array into its own ciphertext; returns the "
            "serialized seeded ciphertexts (bytes), one per row")
        .def(
            "encrypt_complex", &SymmetricEncryptor::encrypt<std::complex<double>>, py::arg("values"),
            "As encrypt_real, for complex128 rows (one complex value per slot)");
}
