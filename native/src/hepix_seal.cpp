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
// computed in coefficient form with one inverse NTT per prime and the plaintext encoded straight to
// coefficient form by a half-size FFT (CoefficientEncoder; SEAL's path would run an N-point FFT,
// transform the plaintext and the noise forward and c0 back again), then rounded and bit-packed.  Compactor converts SEAL bytes
// to the compact format and back; it needs no key.
//
// The batch loops run without the GIL.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <array>
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
#include "seal/util/uintarithsmallmod.h"

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

    // A SEAL context from its serialized parameters: CKKS only, unless `any_scheme` (the Galois keys, which
    // BFV and BGV make the same way).
    std::shared_ptr<seal::SEALContext> load_context(py::bytes context, int security_bits, bool any_scheme = false)
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
        if (parms.scheme() != seal::scheme_type::ckks && !any_scheme)
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

    // CKKS encoding straight to coefficient form, for the fused compact encryption.
    //
    // SEAL's CKKSEncoder fills N complex values (the slots and their conjugates), runs an N-point FFT and
    // then a forward NTT per prime; the fused path would invert that NTT again.  A real polynomial m of
    // X^N + 1 is determined by its values at the N/2 roots zeta^k with k = 1 mod 4 (the others are their
    // conjugates), and at those roots X^(N/2) = i, so u_j = m_j + i m_(j+N/2) (j < N/2) satisfies
    // u(zeta^(4s+1)) = sum_j (u_j zeta^j) nu^(sj), nu = zeta^4: an N/2-point DFT.  Slot i is the value at
    // zeta^(3^i) (SEAL's order); when 3^i = 3 mod 4 its conjugate sits at zeta^(2N - 3^i).  So one
    // N/2-point inverse FFT, a twist by zeta^-j, and rounding give the same coefficients SEAL encodes
    // (tests compare both through decryption).
    class CoefficientEncoder
    {
    public:
        explicit CoefficientEncoder(std::size_t n) : n_(n), half_(n / 2)
        {
            const double pi = std::acos(-1.0);
            const std::size_t m = 2 * n;
            pos_.resize(half_);
            conj_.resize(half_);
            std::uint64_t g = 1;
            for (std::size_t i = 0; i < half_; i++)
            {
                const std::uint64_t k = (g % 4 == 1) ? g : m - g;
                pos_[i] = static_cast<std::size_t>((k - 1) / 4);
                conj_[i] = g % 4 != 1;
                g = (g * 3) % m;
            }
            int log_half = 0;
            while ((std::size_t(1) << log_half) < half_)
                log_half++;
            bitrev_.resize(half_);
            for (std::size_t i = 0; i < half_; i++)
            {
                std::size_t r = 0;
                for (int b = 0; b < log_half; b++)
                    r |= ((i >> b) & 1) << (log_half - 1 - b);
                bitrev_[i] = r;
            }
            tw_re_.resize(half_ / 2 + 1);
            tw_im_.resize(half_ / 2 + 1);
            for (std::size_t t = 0; t < tw_re_.size(); t++)
            {
                const double a = -2.0 * pi * static_cast<double>(t) / static_cast<double>(half_);
                tw_re_[t] = std::cos(a);
                tw_im_[t] = std::sin(a);
            }
            un_re_.resize(half_);
            un_im_.resize(half_);
            for (std::size_t j = 0; j < half_; j++)
            {
                const double a = -pi * static_cast<double>(j) / static_cast<double>(n);
                un_re_[j] = 2.0 / static_cast<double>(n) * std::cos(a);
                un_im_[j] = 2.0 / static_cast<double>(n) * std::sin(a);
            }
            re_.resize(half_);
            im_.resize(half_);
        }

        // Encodes `count` slot values at `scale` into `out` (primes x N residues, coefficient form).
        template <typename T>
        void encode(
            const T *values, std::size_t count, double scale, const std::vector<seal::Modulus> &primes,
            int total_bits, std::uint64_t *out)
        {
            // split real / imaginary arrays: the butterflies vectorize, and no complex-multiply NaN checks
            double *re = re_.data(), *im = im_.data();
            std::fill(re_.begin(), re_.end(), 0.0);
            std::fill(im_.begin(), im_.end(), 0.0);
            for (std::size_t i = 0; i < count; i++)
            {
                const std::complex<double> z(values[i]);
                const std::size_t at = bitrev_[pos_[i]];
                re[at] = z.real();
                im[at] = conj_[i] ? -z.imag() : z.imag();
            }
            // iterative radix-2 inverse DFT (exponent -2 pi i s j / (N/2)), input in bit-reversed order
            for (std::size_t len = 2; len <= half_; len <<= 1)
            {
                const std::size_t step = half_ / len, h = len / 2;
                for (std::size_t start = 0; start < half_; start += len)
                {
                    double *xr = re + start, *xi = im + start, *yr = xr + h, *yi = xi + h;
                    for (std::size_t k = 0; k < h; k++)
                    {
                        const double wr = tw_re_[k * step], wi = tw_im_[k * step];
                        const double tr = wr * yr[k] - wi * yi[k], ti = wr * yi[k] + wi * yr[k];
                        yr[k] = xr[k] - tr;
                        yi[k] = xi[k] - ti;
                        xr[k] += tr;
                        xi[k] += ti;
                    }
                }
            }
            double max_coeff = 0;
            for (std::size_t j = 0; j < half_; j++)
            {
                const double ur = (re[j] * un_re_[j] - im[j] * un_im_[j]) * scale;
                const double ui = (re[j] * un_im_[j] + im[j] * un_re_[j]) * scale;
                const double a = std::fabs(ur), b = std::fabs(ui);
                max_coeff = std::max(max_coeff, std::max(a, b));
                re[j] = ur;
                im[j] = ui;
            }
            // as SEAL's encoder: the coefficients and a sign bit must fit the level's modulus
            if (!(max_coeff < 4.0e18) ||
                static_cast<int>(std::ceil(std::log2(std::max(max_coeff, 1.0)))) + 1 >= total_bits)
                throw std::invalid_argument("encoded values are too large");
            for (std::size_t p = 0; p < primes.size(); p++)
            {
                std::uint64_t *o = out + p * n_;
                for (std::size_t j = 0; j < half_; j++)
                {
                    o[j] = residue(re[j], primes[p]);
                    o[j + half_] = residue(im[j], primes[p]);
                }
            }
        }

    private:
        // x rounded to the nearest integer (halves away from zero), reduced mod q
        static std::uint64_t residue(double x, const seal::Modulus &q)
        {
            const std::int64_t c = static_cast<std::int64_t>(x < 0 ? x - 0.5 : x + 0.5);
            const std::uint64_t a = seal::util::barrett_reduce_64(static_cast<std::uint64_t>(c < 0 ? -c : c), q);
            return (c < 0 && a) ? q.value() - a : a;
        }

        std::size_t n_, half_;
        std::vector<std::size_t> pos_, bitrev_;
        std::vector<bool> conj_;
        std::vector<double> tw_re_, tw_im_, un_re_, un_im_, re_, im_;
    };

    // SEAL's centered binomial noise (sample_poly_cbd: 21 - 21 fair bits per coefficient, sigma 3.2), with
    // the 6 N random bytes drawn in one call instead of one locked PRNG call per coefficient.
    void sample_cbd(
        seal::UniformRandomGenerator &prng, const std::vector<seal::Modulus> &primes, std::size_t n,
        std::vector<std::uint8_t> &bytes, std::uint64_t *destination)
    {
        // bits set per byte (a table: without -mpopcnt the builtin is a library call per byte)
        static const auto weight = [] {
            std::array<std::uint8_t, 256> w{};
            for (int b = 0; b < 256; b++)
                w[b] = static_cast<std::uint8_t>((b & 1) + ((b >> 1) & 1) + ((b >> 2) & 1) + ((b >> 3) & 1) +
                                                 ((b >> 4) & 1) + ((b >> 5) & 1) + ((b >> 6) & 1) + ((b >> 7) & 1));
            return w;
        }();
        prng.generate(bytes.size(), reinterpret_cast<seal::seal_byte *>(bytes.data()));
        for (std::size_t j = 0; j < n; j++)
        {
            const std::uint8_t *x = bytes.data() + 6 * j;
            const int noise = weight[x[0]] + weight[x[1]] + weight[x[2] & 0x1F] - weight[x[3]] - weight[x[4]] -
                              weight[x[5] & 0x1F];
            for (std::size_t p = 0; p < primes.size(); p++)
                destination[p * n + j] =
                    noise < 0 ? primes[p].value() - static_cast<std::uint64_t>(-noise) : static_cast<std::uint64_t>(noise);
        }
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
                    CoefficientEncoder encoder(n);
                    const int total_bits = cd.total_coeff_modulus_bit_count();
                    std::vector<std::uint64_t> m(n * np), c0(n * np), c1(n * np), noise(n * np);
                    std::vector<std::uint8_t> cbd_bytes(6 * n);
                    const auto ntt = cd.small_ntt_tables();
                    const std::uint64_t *sk = secret_key_.data().data(); // NTT form; the level's primes come first
                    const std::size_t sk_stride = n;
                    for (std::size_t r = 0; r < rows.count; r++)
                    {
                        encoder.encode(rows.data + r * rows.width, rows.width, s, primes, total_bits, m.data());
                        // A fresh seed from the system's randomness; the same bootstrap PRNG draws the noise,
                        // as in SEAL's encrypt_zero_symmetric.
                        auto bootstrap = seal::UniformRandomGeneratorFactory::DefaultFactory()->create();
                        seal::prng_seed_type seed;
                        bootstrap->generate(seal::prng_seed_byte_count, reinterpret_cast<seal::seal_byte *>(seed.data()));
                        auto expander = seal::UniformRandomGeneratorInfo(seal::prng_type::blake2xb, seed).make_prng();
                        seal::util::sample_poly_uniform(expander, parms, c1.data()); // c1, NTT form
                        sample_cbd(*bootstrap, primes, n, cbd_bytes, noise.data());    // e, coefficient form
                        for (std::size_t i = 0; i < np; i++)
                        {
                            std::uint64_t *c0i = c0.data() + i * n;
                            seal::util::dyadic_product_coeffmod(c1.data() + i * n, sk + i * sk_stride, n, primes[i], c0i);
                            seal::util::inverse_ntt_negacyclic_harvey(c0i, ntt[i]);                        // c1 s
                            seal::util::sub_poly_coeffmod(m.data() + i * n, c0i, n, primes[i], c0i);          // m - c1 s
                            seal::util::sub_poly_coeffmod(c0i, noise.data() + i * n, n, primes[i], c0i);      // ... - e
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

        // SEAL bytes of ciphertexts computed from compact `originals` (one each) -> lossless compact bytes at
        // their own level; c1 is kept as the original's seed when it is still its expansion (ops that only
        // add plaintexts leave c1 alone).  Nothing is rounded again: repeated processing adds no error.
        py::list compact_like(const py::list &cts, const py::list &originals)
        {
            auto views = views_of(cts), origs = views_of(originals);
            if (views.size() != origs.size())
                throw std::invalid_argument("compact_like needs one original per ciphertext");
            std::vector<std::vector<std::uint8_t>> out(views.size());
            std::string error;
            {
                py::gil_scoped_release nogil;
                std::size_t r = 0;
                try
                {
                    seal::Ciphertext ct;
                    std::vector<std::uint64_t> c1;
                    for (; r < views.size(); r++)
                    {
                        ct.load(*context_, as_seal_bytes(views[r]), views[r].size());
                        const auto h = hepix::read_header(
                            reinterpret_cast<const std::uint8_t *>(origs[r].data()), origs[r].size(), *levels_);
                        const int level = levels_->level_of(ct.parms_id());
                        if (level < 0)
                            throw std::invalid_argument("the ciphertext is not at a data level of this context");
                        seal::prng_seed_type seed;
                        bool seeded = false;
                        if ((h.flags & hepix::FLAG_SEEDED) && level == h.level && ct.size() == 2)
                        {
                            std::memcpy(
                                seed.data(), origs[r].data() + origs[r].size() - seal::prng_seed_byte_count,
                                seal::prng_seed_byte_count);
                            const auto &parms = levels_->at(level).parms();
                            c1.resize(parms.poly_modulus_degree() * parms.coeff_modulus().size());
                            auto prng = seal::UniformRandomGeneratorInfo(static_cast<seal::prng_type>(h.prng), seed).make_prng();
                            seal::util::sample_poly_uniform(prng, parms, c1.data());
                            seeded = std::memcmp(c1.data(), ct.data(1), c1.size() * sizeof(std::uint64_t)) == 0;
                        }
                        hepix::compact_ciphertext(
                            ct, *levels_, static_cast<std::size_t>(level), 0, 0, seeded ? &seed : nullptr,
                            static_cast<seal::prng_type>(h.prng), out[r]);
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
    // The Galois keys of exactly `steps` for the owner's secret key, serialized as Pyfhel's
    // from_bytes_rotate_key reads them.  (Pyfhel's rotateKeyGen takes its key generator from the context,
    // made with a fresh secret, not the one loaded since: its keys would belong to another key.)
    py::bytes galois_keys(py::bytes context, py::bytes secret_key, const std::vector<int> &steps,
                          const std::string &compression, int security_bits)
    {
        auto ctx = load_context(context, security_bits, true);
        if (steps.empty())
            throw std::invalid_argument("no rotation steps were given");
        std::string_view key_bytes = secret_key;
        if (key_bytes.empty())
            throw std::invalid_argument("the secret key bytes are empty");
        seal::SecretKey sk;
        try
        {
            sk.load(*ctx, as_seal_bytes(key_bytes), key_bytes.size());
        }
        catch (const std::exception &e)
        {
            throw std::invalid_argument(
                std::string("the secret key bytes do not load as a secret key of this context: ") + e.what());
        }
        const auto mode = compression_from(compression);
        std::vector<std::uint8_t> out;
        {
            py::gil_scoped_release nogil;
            seal::GaloisKeys keys;
            seal::KeyGenerator(*ctx, sk).create_galois_keys(steps, keys);
            out.resize(static_cast<std::size_t>(keys.save_size(mode)));
            out.resize(static_cast<std::size_t>(
                keys.save(reinterpret_cast<seal::seal_byte *>(out.data()), out.size(), mode)));
        }
        return py::bytes(reinterpret_cast<const char *>(out.data()), out.size());
    }

    // The Galois elements a serialized GaloisKeys holds a key for, ascending: 3^k mod 2N for a rotation,
    // 2N - 1 for CKKS's complex conjugation.  The keys are loaded (and checked) against the context.
    std::vector<std::uint64_t> galois_elements(py::bytes context, py::bytes galois_keys, int security_bits)
    {
        auto ctx = load_context(context, security_bits, true);
        std::string_view key_bytes = galois_keys;
        seal::GaloisKeys keys;
        try
        {
            keys.load(*ctx, as_seal_bytes(key_bytes), key_bytes.size());
        }
        catch (const std::exception &e)
        {
            throw std::invalid_argument(std::string("the bytes do not load as Galois keys of this context: ") +
                                        e.what());
        }
        std::vector<std::uint64_t> out;
        const auto &data = keys.data();
        for (std::size_t i = 0; i < data.size(); ++i)
            if (!data[i].empty())
                out.push_back(2 * static_cast<std::uint64_t>(i) + 1);
        return out;
    }
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

    m.def("galois_keys", &galois_keys, py::arg("context"), py::arg("secret_key"), py::arg("steps"),
          py::arg("compression") = "zstd", py::arg("security_bits") = 128,
          "The Galois keys of exactly these rotation steps for this secret key (context and secret_key as for "
          "SymmetricEncryptor), serialized as SEAL saves them (Pyfhel's from_bytes_rotate_key reads them)");

    m.def("galois_elements", &galois_elements, py::arg("context"), py::arg("galois_keys"),
          py::arg("security_bits") = 128,
          "The Galois elements these serialized Galois keys (of this context) hold a key for, ascending: "
          "3^k mod 2N a rotation's, 2N - 1 the complex conjugation's");

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
        .def("compact_like", &Compactor::compact_like, py::arg("cts"), py::arg("originals"),
             "SEAL bytes of ciphertexts computed from compact originals -> lossless compact bytes, c1 kept as "
             "the original's seed where it is unchanged")
        .def("expand", &Compactor::expand, py::arg("blobs"),
             "Compact bytes -> uncompressed SEAL ciphertext bytes; ValueError naming the first bad one")
        .def("header", &Compactor::header, py::arg("blob"),
             "The checked header of one compact ciphertext: (flags, level, primes, drop0, drop1, scale)");
}
