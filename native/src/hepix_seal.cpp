// hepix_seal: secret-key (symmetric) CKKS encryption with SEAL's seeded serialisation, and hepix's
// compact at-rest format (atrest.cpp).
//
// Pyfhel 3.5 exposes public-key encryption only.  This module links the very SEAL 4.1 library
// the installed Pyfhel wheel ships (libseal-4.1.a, configured with the same options), loads the
// context and secret key bytes Pyfhel writes, and encrypts whole batches of slot vectors with
// Encryptor(context, secret_key).encrypt_symmetric(...).  The result of encrypt_symmetric is
// SEAL's Serializable<Ciphertext>: its second component is stored as the seed it is expanded
// from, so the bytes are about half a ciphertext.  SEAL expands the seed when the bytes are
// loaded, so Pyfhel (PyCtxt from bytes) reads them like any other ciphertext.
//
// Encryption can happen at any level of the modulus chain: a plaintext encoded at a lower level's
// parms_id is encrypted there, with fewer primes and so less work.  encrypt_compact_* encrypts
// straight into the compact format: c1 is sampled from a fresh seed, c0 = INTT(m - c1 s) - e is
// computed in coefficient form with one inverse NTT per prime (SEAL's path would transform the
// noise forward and c0 back again), then rounded and bit-packed.  Compactor converts SEAL bytes
// to the compact format and back; it needs no key.
//
// The batch loops run without the GIL.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cmath>
#include <complex>
#include <cstring>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "atrest.hpp"
#include "seal/seal.h"
#include "seal/util/ntt.h"
#include "seal/util/polyarithsmallmod.h"
#include "seal/util/rlwe.h"

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

    std::shared_ptr<seal::SEALContext> load_context(py::bytes context, int security_bits)
    {
        std::string_view ctx_bytes = context;
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
            throw std::invalid_argument("hepix_seal implements CKKS contexts only");
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
            throw std::invalid_argument("security_bits must be 128, 192 or 256, got " + std::to_string(security_bits));
        }
        auto loaded = std::make_shared<seal::SEALContext>(parms, true, level);
        if (!loaded->parameters_set())
            throw std::invalid_argument(
                "the context's parameters are not valid at " + std::to_string(security_bits) +
                "-bit security: " + loaded->parameter_error_message());
        return loaded;
    }

    py::bytes to_bytes(const std::vector<std::uint8_t> &v)
    {
        return py::bytes(reinterpret_cast<const char *>(v.data()), v.size());
    }

    // The byte strings of a Python list (of bytes), read while the GIL is held; the list keeps them alive.
    std::vector<std::string_view> views_of(const py::list &items)
    {
        std::vector<std::string_view> views;
        views.reserve(items.size());
        for (auto item : items)
        {
            if (!py::isinstance<py::bytes>(item))
                throw std::invalid_argument("expected a list of bytes, found " + std::string(py::str(py::type::of(item))));
            char *buf = nullptr;
            Py_ssize_t len = 0;
            if (PyBytes_AsStringAndSize(item.ptr(), &buf, &len) != 0)
                throw py::error_already_set();
            views.emplace_back(buf, static_cast<std::size_t>(len));
        }
        return views;
    }

    py::list list_of(std::vector<std::vector<std::uint8_t>> &out)
    {
        py::list result(out.size());
        for (std::size_t r = 0; r < out.size(); r++)
        {
            result[r] = to_bytes(out[r]);
            std::vector<std::uint8_t>().swap(out[r]);
        }
        return result;
    }

    // Where the seed of an uncompressed seeded SEAL 4.x ciphertext lies, if these bytes are one:
    // a 113-byte prefix, N x primes words of c0, then the PRNG info (16-byte SEAL header, type, seed).
    bool seeded_seal_bytes(
        std::string_view raw, const seal::Ciphertext &ct, seal::prng_seed_type &seed, seal::prng_type &type)
    {
        constexpr std::size_t prefix = 113, info = 16 + 1 + seal::prng_seed_byte_count;
        if (raw.size() < prefix || static_cast<std::uint8_t>(raw[5]) != 0)
            return false; // compressed: SEAL already expanded the seed while loading
        std::uint64_t count;
        std::memcpy(&count, raw.data() + 105, 8);
        const std::size_t words = ct.poly_modulus_degree() * ct.coeff_modulus_size();
        if (count != words || raw.size() != prefix + 8 * words + info)
            return false;
        const char *p = raw.data() + prefix + 8 * words + 16;
        type = static_cast<seal::prng_type>(static_cast<std::uint8_t>(p[0]));
        std::memcpy(seed.data(), p + 1, seal::prng_seed_byte_count);
        return true;
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
            context_ = load_context(context, security_bits);
            levels_ = std::make_unique<hepix::Levels>(context_);
            std::string_view key_bytes = secret_key;
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
            check_scale(scale, 0);
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

        std::size_t levels() const
        {
            return levels_->count();
        }

        // SEAL bytes (seeded, in the encryptor's compression), one ciphertext per row, at `level`.
        template <typename T>
        py::list encrypt(
            py::array_t<T, py::array::c_style | py::array::forcecast> values, std::size_t level,
            std::optional<double> scale)
        {
            const double s = scale.value_or(scale_);
            check_scale(s, level);
            const auto parms_id = levels_->at(level).parms_id();
            Rows<T> rows(values, slots());
            std::vector<std::vector<std::uint8_t>> out(rows.count);
            std::string error;
            {
                py::gil_scoped_release nogil;
                seal::Plaintext plain;
                try
                {
                    for (std::size_t r = 0; r < rows.count; r++)
                    {
                        encoder_->encode(rows.row(r), parms_id, s, plain);
                        auto ct = encryptor_->encrypt_symmetric(plain);
                        auto &buf = out[r];
                        buf.resize(static_cast<std::size_t>(ct.save_size(compression_)));
                        auto used = ct.save(reinterpret_cast<seal::seal_byte *>(buf.data()), buf.size(), compression_);
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
            return list_of(out);
        }

        // Compact ciphertexts (atrest.cpp), one per row, at `level`, c0 rounded by `drop0` bits.
        template <typename T>
        py::list encrypt_compact(
            py::array_t<T, py::array::c_style | py::array::forcecast> values, std::size_t level,
            std::optional<double> scale, int drop0)
        {
            const double s = scale.value_or(scale_);
            check_scale(s, level);
            const auto &cd = levels_->at(level);
            const auto &parms = cd.parms();
            const auto &primes = parms.coeff_modulus();
            const std::size_t n = parms.poly_modulus_degree(), np = primes.size();
            if (drop0 < 0 || (drop0 && np != 1))
                throw std::invalid_argument(
                    "drop0 must be 0, or positive at a one-prime level; level " + std::to_string(level) + " has " +
                    std::to_string(np) + " primes");
            for (auto &q : primes)
                if (hepix::stored_width(q.value(), drop0) < 1)
                    throw std::invalid_argument("cannot drop " + std::to_string(drop0) + " bits of a prime of this level");
            hepix::CompactHeader h;
            h.flags = hepix::FLAG_SEEDED | hepix::FLAG_COEFF;
            h.level = static_cast<std::uint8_t>(level);
            h.primes = static_cast<std::uint8_t>(np);
            h.drop0 = static_cast<std::uint8_t>(drop0);
            h.log_n = static_cast<std::uint8_t>(std::log2(static_cast<double>(n)));
            h.prng = static_cast<std::uint8_t>(seal::prng_type::blake2xb);
            h.tag = hepix::Levels::tag(cd.parms_id());
            h.scale = s;
            Rows<T> rows(values, slots());
            std::vector<std::vector<std::uint8_t>> out(rows.count);
            std::string error;
            {
                py::gil_scoped_release nogil;
                try
                {
                    seal::Plaintext plain;
                    std::vector<std::uint64_t> c0(n * np), c1(n * np), noise(n * np);
                    const auto ntt = cd.small_ntt_tables();
                    const std::uint64_t *sk = secret_key_.data().data(); // NTT form; the level's primes come first
                    const std::size_t sk_stride = n;
                    for (std::size_t r = 0; r < rows.count; r++)
                    {
                        encoder_->encode(rows.row(r), cd.parms_id(), s, plain);
                        // A fresh seed from the system's randomness; the same bootstrap PRNG draws the noise,
                        // as in SEAL's encrypt_zero_symmetric.
                        auto bootstrap = seal::UniformRandomGeneratorFactory::DefaultFactory()->create();
                        seal::prng_seed_type seed;
                        bootstrap->generate(seal::prng_seed_byte_count, reinterpret_cast<seal::seal_byte *>(seed.data()));
                        auto expander = seal::UniformRandomGeneratorInfo(seal::prng_type::blake2xb, seed).make_prng();
                        seal::util::sample_poly_uniform(expander, parms, c1.data()); // c1, NTT form
                        seal::util::sample_poly_cbd(bootstrap, parms, noise.data());  // e, coefficient form
                        for (std::size_t i = 0; i < np; i++)
                        {
                            std::uint64_t *c0i = c0.data() + i * n;
                            seal::util::dyadic_product_coeffmod(c1.data() + i * n, sk + i * sk_stride, n, primes[i], c0i);
                            seal::util::sub_poly_coeffmod(plain.data() + i * n, c0i, n, primes[i], c0i); // m - c1 s
                            seal::util::inverse_ntt_negacyclic_harvey(c0i, ntt[i]);
                            seal::util::sub_poly_coeffmod(c0i, noise.data() + i * n, n, primes[i], c0i); // ... - e
                        }
                        hepix::write_compact(h, primes, n, c0.data(), nullptr, &seed, out[r]);
                    }
                }
                catch (const std::exception &e)
                {
                    error = e.what();
                }
            }
            if (!error.empty())
                throw std::invalid_argument("cannot encrypt the values: " + error);
            return list_of(out);
        }

    private:
        template <typename T>
        struct Rows
        {
            const T *data;
            std::size_t count, width;

            Rows(py::array_t<T, py::array::c_style | py::array::forcecast> &values, std::size_t slots)
            {
                if (values.ndim() != 1 && values.ndim() != 2)
                    throw std::invalid_argument(
                        "values must be a 1-D slot vector or a 2-D batch (one row per ciphertext), got " +
                        std::to_string(values.ndim()) + " dimensions");
                count = values.ndim() == 2 ? static_cast<std::size_t>(values.shape(0)) : 1;
                width = static_cast<std::size_t>(values.shape(values.ndim() - 1));
                if (width > slots)
                    throw std::invalid_argument(
                        "a row of " + std::to_string(width) + " values does not fit the " + std::to_string(slots) +
                        " slots of a ciphertext");
                data = values.data();
            }

            gsl::span<const T> row(std::size_t r) const
            {
                return gsl::span<const T>(data + r * width, width);
            }
        };

        void check_scale(double scale, std::size_t level) const
        {
            const auto &cd = levels_->at(level);
            if (!(scale >= 1.0) || !std::isfinite(scale) ||
                std::log2(scale) + 1 >= static_cast<double>(cd.total_coeff_modulus_bit_count()))
                throw std::invalid_argument(
                    "scale 2^" + std::to_string(std::log2(scale)) + " does not fit the " +
                    std::to_string(cd.total_coeff_modulus_bit_count()) + "-bit modulus of level " + std::to_string(level));
        }

        double scale_;
        seal::compr_mode_type compression_;
        std::string compression_name_;
        std::shared_ptr<seal::SEALContext> context_;
        std::unique_ptr<hepix::Levels> levels_;
        seal::SecretKey secret_key_;
        std::unique_ptr<seal::CKKSEncoder> encoder_;
        std::unique_ptr<seal::Encryptor> encryptor_;
    };

    // Public conversions between SEAL bytes and the compact format (no key needed).
    class Compactor
    {
    public:
        Compactor(py::bytes context, int security_bits)
        {
            context_ = load_context(context, security_bits);
            levels_ = std::make_unique<hepix::Levels>(context_);
        }

        std::size_t levels() const
        {
            return levels_->count();
        }

        std::vector<std::uint64_t> primes(std::size_t level) const
        {
            std::vector<std::uint64_t> out;
            for (auto &q : levels_->at(level).parms().coeff_modulus())
                out.push_back(q.value());
            return out;
        }

        py::bytes parms_id(std::size_t level) const
        {
            const auto &id = levels_->at(level).parms_id();
            return py::bytes(reinterpret_cast<const char *>(id.data()), sizeof(id));
        }

        // SEAL bytes -> compact bytes at `level` (mod-switched down when needed), c0 rounded by drop0
        // bits and c1 by drop1 (unless it is kept as its seed: uncompressed seeded input at its own level).
        py::list compact(const py::list &cts, std::size_t level, int drop0, int drop1, bool keep_seed)
        {
            levels_->at(level);
            auto views = views_of(cts);
            std::vector<std::vector<std::uint8_t>> out(views.size());
            std::string error;
            {
                py::gil_scoped_release nogil;
                std::size_t r = 0;
                try
                {
                    seal::Ciphertext ct;
                    for (; r < views.size(); r++)
                    {
                        try
                        {
                            ct.load(*context_, as_seal_bytes(views[r]), views[r].size());
                        }
                        catch (const std::exception &e)
                        {
                            throw std::invalid_argument(std::string("not a SEAL ciphertext of this context: ") + e.what());
                        }
                        seal::prng_seed_type seed;
                        seal::prng_type type = seal::prng_type::unknown;
                        const bool seeded = keep_seed && levels_->level_of(ct.parms_id()) == static_cast<int>(level) &&
                                            seeded_seal_bytes(views[r], ct, seed, type) &&
                                            (type == seal::prng_type::blake2xb || type == seal::prng_type::shake256);
                        hepix::compact_ciphertext(
                            ct, *levels_, level, drop0, seeded ? 0 : drop1, seeded ? &seed : nullptr, type, out[r]);
                    }
                }
                catch (const std::exception &e)
                {
                    error = "ciphertext " + std::to_string(r) + ": " + e.what();
                }
            }
            if (!error.empty())
                throw std::invalid_argument(error);
            return list_of(out);
        }

        // Compact bytes -> uncompressed SEAL bytes, every input checked (header, size, values < q).
        py::list expand(const py::list &blobs)
        {
            auto views = views_of(blobs);
            std::vector<std::vector<std::uint8_t>> out(views.size());
            std::string error;
            {
                py::gil_scoped_release nogil;
                std::size_t r = 0;
                try
                {
                    seal::Ciphertext ct;
                    for (; r < views.size(); r++)
                    {
                        hepix::expand_compact(
                            reinterpret_cast<const std::uint8_t *>(views[r].data()), views[r].size(), *levels_, ct);
                        auto &buf = out[r];
                        buf.resize(static_cast<std::size_t>(ct.save_size(seal::compr_mode_type::none)));
                        auto used = ct.save(
                            reinterpret_cast<seal::seal_byte *>(buf.data()), buf.size(), seal::compr_mode_type::none);
                        buf.resize(static_cast<std::size_t>(used));
                    }
                }
                catch (const std::exception &e)
                {
                    error = "compact ciphertext " + std::to_string(r) + ": " + e.what();
                }
            }
            if (!error.empty())
                throw std::invalid_argument(error);
            return list_of(out);
        }

        // The checked header of one compact ciphertext: (flags, level, primes, drop0, drop1, scale).
        py::tuple header(py::bytes blob) const
        {
            std::string_view v = blob;
            auto h = hepix::read_header(reinterpret_cast<const std::uint8_t *>(v.data()), v.size(), *levels_);
            return py::make_tuple(h.flags, h.level, h.primes, h.drop0, h.drop1, h.scale);
        }

    private:
        std::shared_ptr<seal::SEALContext> context_;
        std::unique_ptr<hepix::Levels> levels_;
    };
} // namespace

PYBIND11_MODULE(hepix_seal, m)
{
    m.doc() = "Secret-key (symmetric) CKKS encryption with seeded serialisation, and the compact at-rest "
              "format, on the SEAL library Pyfhel ships";
    m.attr("SEAL_VERSION") = SEAL_VERSION;
    m.attr("BUILD_KEY") = HEPIX_BUILD_KEY;
    m.attr("COMPACT_MAGIC") = py::bytes(reinterpret_cast<const char *>(hepix::COMPACT_MAGIC), 4);
    m.attr("COMPACT_VERSION") = hepix::COMPACT_VERSION;
    m.attr("COMPACT_HEADER_SIZE") = hepix::COMPACT_HEADER_SIZE;
    m.attr("FLAG_SEEDED") = hepix::FLAG_SEEDED;
    m.attr("FLAG_COEFF") = hepix::FLAG_COEFF;

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
        .def_property_readonly("levels", &SymmetricEncryptor::levels)
        .def(
            "encrypt_real", &SymmetricEncryptor::encrypt<double>, py::arg("values"), py::arg("level") = 0,
            py::arg("scale") = py::none(),
            "Encrypt each row of a float64 (rows, k <= slots) array into its own ciphertext at `level` (primes "
            "dropped from the first data level) and `scale` (default the encryptor's); returns the serialized "
            "seeded ciphertexts (bytes), one per row")
        .def(
            "encrypt_complex", &SymmetricEncryptor::encrypt<std::complex<double>>, py::arg("values"),
            py::arg("level") = 0, py::arg("scale") = py::none(),
            "As encrypt_real, for complex128 rows (one complex value per slot)")
        .def(
            "encrypt_compact_real", &SymmetricEncryptor::encrypt_compact<double>, py::arg("values"),
            py::arg("level") = 0, py::arg("scale") = py::none(), py::arg("drop0") = 0,
            "As encrypt_real, into the compact at-rest format: c1 as its seed, c0 in coefficient form with "
            "`drop0` low bits dropped (one-prime levels only), bit-packed")
        .def(
            "encrypt_compact_complex", &SymmetricEncryptor::encrypt_compact<std::complex<double>>, py::arg("values"),
            py::arg("level") = 0, py::arg("scale") = py::none(), py::arg("drop0") = 0,
            "As encrypt_compact_real, for complex128 rows");

    py::class_<Compactor>(m, "Compactor")
        .def(py::init<py::bytes, int>(), py::arg("context"), py::arg("security_bits") = 128,
             "context: SEAL EncryptionParameters bytes, as for SymmetricEncryptor; no key is needed")
        .def_property_readonly("levels", &Compactor::levels)
        .def("primes", &Compactor::primes, py::arg("level"), "The primes of a level (0 = first data level)")
        .def("parms_id", &Compactor::parms_id, py::arg("level"), "SEAL's parms_id of a level (32 bytes)")
        .def(
            "compact", &Compactor::compact, py::arg("cts"), py::arg("level"), py::arg("drop0") = 0,
            py::arg("drop1") = 0, py::arg("keep_seed") = true,
            "SEAL ciphertext bytes -> compact bytes at `level` (mod-switched down when higher)")
        .def("expand", &Compactor::expand, py::arg("blobs"),
             "Compact bytes -> uncompressed SEAL ciphertext bytes; ValueError naming the first bad one")
        .def("header", &Compactor::header, py::arg("blob"),
             "The checked header of one compact ciphertext: (flags, level, primes, drop0, drop1, scale)");
}
