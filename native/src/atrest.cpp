// hepix's compact at-rest format for CKKS ciphertexts.
//
// A SEAL ciphertext serialized uncompressed stores a constant 113-byte prefix and every residue of
// both components as a 64-bit word.  At rest, decryption needs less:
//   * the level's primes only (a chain that spends no level can be stored at the last one, q0),
//   * c1 as the 64-byte seed it is expanded from (secret-key encryptions; SEAL does the same),
//   * each residue at its prime's real width (40 bits for a 40-bit prime, not 64),
//   * of c0, not the low bits that lie below the noise: a coefficient c (coefficient form, one
//     prime) is stored as r = floor(c / 2^d) and read back as r 2^d + 2^(d-1) (mod q), so the
//     error it adds is uniform in (-2^(d-1), 2^(d-1)].  Rounding is public post-processing of
//     the ciphertext: it keeps IND-CPA.  hecore.planner bounds the error it adds in the slots.
//
// Byte layout (little-endian), version 1:
//   0   4  magic "HPXC"
//   4   1  version (1)
//   5   1  flags: 1 = SEEDED (c1 stored as a seed), 2 = COEFF (stored polynomials in coefficient form)
//   6   1  level: primes dropped from the first data level (0 = a fresh ciphertext's level)
//   7   1  primes at that level
//   8   1  d0: low bits dropped from c0 (> 0 only in coefficient form at a one-prime level)
//   9   1  d1: low bits dropped from c1 (0 when seeded)
//   10  1  log2 N
//   11  1  PRNG of the seed (SEAL's prng_type: 1 blake2xb, 2 shake256; 0 when not seeded)
//   12  4  the low 32 bits of the level's parms_id (SEAL's hash of the level's parameters)
//   16  8  scale (float64)
//   24     c0: for each prime, its N residues r (width bitlen(q - 1) - d0), bit-packed LSB first;
//          the bit stream is padded to a whole byte
//   ...    c1: the 64-byte seed (SEEDED; expanded in NTT form by SEAL's sample_poly_uniform at the
//          level's parameters), or packed as c0 with d1
// Nothing else: the size is a function of the header and the context, and is checked exactly.
#include "atrest.hpp"

#include <cmath>
#include <cstring>
#include <stdexcept>

#include "seal/util/ntt.h"
#include "seal/util/rlwe.h"

namespace hepix
{
    using seal::Modulus;
    using std::size_t;
    using std::uint64_t;
    using std::uint8_t;

    namespace
    {
        int bit_length(uint64_t v)
        {
            int b = 0;
            while (v)
            {
                b++;
                v >>= 1;
            }
            return b;
        }

        void pack(const uint64_t *values, const std::vector<Modulus> &primes, size_t n, int drop, uint8_t *out)
        {
            unsigned __int128 acc = 0;
            int bits = 0;
            for (size_t i = 0; i < primes.size(); i++)
            {
                const int width = stored_width(primes[i].value(), drop);
                const uint64_t *v = values + i * n;
                for (size_t j = 0; j < n; j++)
                {
                    acc |= static_cast<unsigned __int128>(v[j] >> drop) << bits;
                    bits += width;
                    while (bits >= 64)
                    {
                        const uint64_t word = static_cast<uint64_t>(acc);
                        std::memcpy(out, &word, 8);
                        out += 8;
                        acc >>= 64;
                        bits -= 64;
                    }
                }
            }
            while (bits > 0)
            {
                *out++ = static_cast<uint8_t>(acc & 0xFF);
                acc >>= 8;
                bits -= 8;
            }
        }

        // Unpacks and checks one polynomial; returns false (and the offending position) when a
        // stored value is out of range for its prime.
        bool unpack(
            const uint8_t *in, size_t in_bytes, const std::vector<Modulus> &primes, size_t n, int drop,
            uint64_t *values, size_t &bad_prime, size_t &bad_index, uint64_t &bad_value)
        {
            unsigned __int128 acc = 0;
            int bits = 0;
            size_t pos = 0;
            for (size_t i = 0; i < primes.size(); i++)
            {
                const uint64_t q = primes[i].value();
                const int width = stored_width(q, drop);
                const uint64_t mask = width == 64 ? ~0ULL : ((1ULL << width) - 1);
                const uint64_t max_r = (q - 1) >> drop;
                const uint64_t half = drop ? (1ULL << (drop - 1)) : 0;
                uint64_t *v = values + i * n;
                for (size_t j = 0; j < n; j++)
                {
                    while (bits < width)
                    {
                        if (pos + 8 <= in_bytes)
                        {
                            uint64_t word;
                            std::memcpy(&word, in + pos, 8);
                            acc |= static_cast<unsigned __int128>(word) << bits;
                            pos += 8;
                            bits += 64;
                        }
                        else
                        {
                            acc |= static_cast<unsigned __int128>(in[pos]) << bits;
                            pos += 1;
                            bits += 8;
                        }
                    }
                    const uint64_t r = static_cast<uint64_t>(acc) & mask;
                    acc >>= width;
                    bits -= width;
                    if (r > max_r)
                    {
                        bad_prime = i;
                        bad_index = j;
                        bad_value = r;
                        return false;
                    }
                    uint64_t x = (r << drop) + half;
                    if (x >= q)
                        x -= q;
                    v[j] = x;
                }
            }
            return true;
        }

        template <typename T>
        void put(std::vector<uint8_t> &out, size_t at, T value)
        {
            std::memcpy(out.data() + at, &value, sizeof(T));
        }

        template <typename T>
        T get(const uint8_t *data, size_t at)
        {
            T value;
            std::memcpy(&value, data + at, sizeof(T));
            return value;
        }
    } // namespace

    Levels::Levels(std::shared_ptr<seal::SEALContext> context) : context_(std::move(context))
    {
        for (auto cd = context_->first_context_data(); cd; cd = cd->next_context_data())
            levels_.push_back(cd);
        if (levels_.empty())
            throw std::invalid_argument("the context has no data levels");
    }

    const seal::SEALContext::ContextData &Levels::at(size_t level) const
    {
        if (level >= levels_.size())
            throw std::invalid_argument(
                "level " + std::to_string(level) + " does not exist: this context has levels 0.." +
                std::to_string(levels_.size() - 1));
        return *levels_[level];
    }

    int Levels::level_of(const seal::parms_id_type &parms_id) const
    {
        for (size_t i = 0; i < levels_.size(); i++)
            if (levels_[i]->parms_id() == parms_id)
                return static_cast<int>(i);
        return -1;
    }

    int stored_width(uint64_t q, int drop)
    {
        return bit_length(q - 1) - drop;
    }

    size_t packed_poly_bytes(const std::vector<Modulus> &primes, size_t n, int drop)
    {
        size_t bits = 0;
        for (auto &q : primes)
            bits += n * static_cast<size_t>(stored_width(q.value(), drop));
        return (bits + 7) / 8;
    }

    size_t compact_size(const CompactHeader &h, const std::vector<Modulus> &primes, size_t n)
    {
        size_t size = COMPACT_HEADER_SIZE + packed_poly_bytes(primes, n, h.drop0);
        size += (h.flags & FLAG_SEEDED) ? seal::prng_seed_byte_count : packed_poly_bytes(primes, n, h.drop1);
        return size;
    }

    void write_compact(
        const CompactHeader &h, const std::vector<Modulus> &primes, size_t n, const uint64_t *c0, const uint64_t *c1,
        const seal::prng_seed_type *seed, std::vector<uint8_t> &out)
    {
        out.assign(compact_size(h, primes, n), 0);
        std::memcpy(out.data(), COMPACT_MAGIC, 4);
        out[4] = COMPACT_VERSION;
        out[5] = h.flags;
        out[6] = h.level;
        out[7] = h.primes;
        out[8] = h.drop0;
        out[9] = h.drop1;
        out[10] = h.log_n;
        out[11] = h.prng;
        put<std::uint32_t>(out, 12, h.tag);
        put<double>(out, 16, h.scale);
        size_t at = COMPACT_HEADER_SIZE;
        pack(c0, primes, n, h.drop0, out.data() + at);
        at += packed_poly_bytes(primes, n, h.drop0);
        if (h.flags & FLAG_SEEDED)
            std::memcpy(out.data() + at, seed->data(), seal::prng_seed_byte_count);
        else
            pack(c1, primes, n, h.drop1, out.data() + at);
    }

    CompactHeader read_header(const uint8_t *data, size_t size, const Levels &levels)
    {
        if (size < COMPACT_HEADER_SIZE)
            throw std::invalid_argument(
                "compact ciphertext of " + std::to_string(size) + " bytes is shorter than its " +
                std::to_string(COMPACT_HEADER_SIZE) + "-byte header (truncated)");
        if (std::memcmp(data, COMPACT_MAGIC, 4) != 0)
            throw std::invalid_argument("not a compact ciphertext (no HPXC magic)");
        if (data[4] != COMPACT_VERSION)
            throw std::invalid_argument(
                "compact format version " + std::to_string(data[4]) + " is not supported (this build reads " +
                std::to_string(COMPACT_VERSION) + "); upgrade hepix");
        CompactHeader h;
        h.flags = data[5];
        h.level = data[6];
        h.primes = data[7];
        h.drop0 = data[8];
        h.drop1 = data[9];
        h.log_n = data[10];
        h.prng = data[11];
        h.tag = get<std::uint32_t>(data, 12);
        h.scale = get<double>(data, 16);
        if (h.flags & ~KNOWN_FLAGS)
            throw std::invalid_argument("unknown flags " + std::to_string(h.flags) + " in the compact header");
        const auto &cd = levels.at(h.level); // throws for a level this context does not have
        const auto &parms = cd.parms();
        const auto &primes = parms.coeff_modulus();
        const size_t n = parms.poly_modulus_degree();
        if ((size_t(1) << h.log_n) != n || h.log_n >= 32)
            throw std::invalid_argument(
                "compact header says N = 2^" + std::to_string(h.log_n) + ", the context has N = " + std::to_string(n));
        if (h.primes != primes.size())
            throw std::invalid_argument(
                "compact header says " + std::to_string(h.primes) + " primes at level " + std::to_string(h.level) +
                ", the context has " + std::to_string(primes.size()));
        if (h.tag != Levels::tag(cd.parms_id()))
            throw std::invalid_argument(
                "the compact ciphertext was made with other encryption parameters (parms_id tag mismatch at level " +
                std::to_string(h.level) + ")");
        const bool seeded = h.flags & FLAG_SEEDED;
        if ((h.drop0 || h.drop1) && !(h.flags & FLAG_COEFF))
            throw std::invalid_argument("dropped bits need coefficient form (flag COEFF) in the compact header");
        if ((h.drop0 || h.drop1) && primes.size() != 1)
            throw std::invalid_argument("dropped bits are defined for one-prime levels only");
        for (auto &q : primes)
        {
            if (stored_width(q.value(), h.drop0) < 1 || (!seeded && stored_width(q.value(), h.drop1) < 1))
                throw std::invalid_argument(
                    "the compact header drops " + std::to_string(std::max(h.drop0, h.drop1)) + " bits of a " +
                    std::to_string(bit_length(q.value())) + "-bit prime");
        }
        if (seeded)
        {
            if (h.drop1)
                throw std::invalid_argument("a seeded compact ciphertext cannot drop bits of c1");
            if (h.prng != static_cast<uint8_t>(seal::prng_type::blake2xb) &&
                h.prng != static_cast<uint8_t>(seal::prng_type::shake256))
                throw std::invalid_argument("unknown PRNG type " + std::to_string(h.prng) + " for the seed");
        }
        else if (h.prng)
            throw std::invalid_argument("a PRNG type is set but the compact ciphertext holds no seed");
        if (!std::isfinite(h.scale) || h.scale < 1.0 ||
            std::log2(h.scale) >= static_cast<double>(cd.total_coeff_modulus_bit_count()))
            throw std::invalid_argument(
                "scale " + std::to_string(h.scale) + " in the compact header is out of range for level " +
                std::to_string(h.level));
        const size_t want = compact_size(h, primes, n);
        if (size != want)
            throw std::invalid_argument(
                "compact ciphertext has " + std::to_string(size) + " bytes; its header says " + std::to_string(want) +
                (size < want ? " (truncated)" : " (trailing bytes)"));
        return h;
    }

    void expand_compact(const uint8_t *data, size_t size, const Levels &levels, seal::Ciphertext &out)
    {
        const CompactHeader h = read_header(data, size, levels);
        const auto &cd = levels.at(h.level);
        const auto &parms = cd.parms();
        const auto &primes = parms.coeff_modulus();
        const size_t n = parms.poly_modulus_degree();
        const auto ntt = cd.small_ntt_tables();
        out.resize(levels.context(), cd.parms_id(), 2);
        size_t at = COMPACT_HEADER_SIZE;
        size_t bad_prime = 0, bad_index = 0;
        uint64_t bad_value = 0;
        const size_t c0_bytes = packed_poly_bytes(primes, n, h.drop0);
        const bool coeff = h.flags & FLAG_COEFF;
        auto fail = [&](const char *which) {
            throw std::invalid_argument(
                std::string("compact ciphertext: ") + which + " coefficient " + std::to_string(bad_index) +
                " of prime " + std::to_string(bad_prime) + " is stored as " + std::to_string(bad_value) +
                ", beyond the prime " + std::to_string(primes[bad_prime].value()) + " (corrupt or forged bytes)");
        };
        if (!unpack(data + at, c0_bytes, primes, n, h.drop0, out.data(0), bad_prime, bad_index, bad_value))
            fail("c0");
        at += c0_bytes;
        if (coeff)
            for (size_t i = 0; i < primes.size(); i++)
                seal::util::ntt_negacyclic_harvey(out.data(0) + i * n, ntt[i]);
        if (h.flags & FLAG_SEEDED)
        {
            seal::prng_seed_type seed;
            std::memcpy(seed.data(), data + at, seal::prng_seed_byte_count);
            seal::UniformRandomGeneratorInfo info(static_cast<seal::prng_type>(h.prng), seed);
            auto prng = info.make_prng();
            if (!prng)
                throw std::invalid_argument("unsupported PRNG type in the compact header");
            seal::util::sample_poly_uniform(prng, parms, out.data(1));
        }
        else
        {
            if (!unpack(
                    data + at, packed_poly_bytes(primes, n, h.drop1), primes, n, h.drop1, out.data(1), bad_prime,
                    bad_index, bad_value))
                fail("c1");
            if (coeff)
                for (size_t i = 0; i < primes.size(); i++)
                    seal::util::ntt_negacyclic_harvey(out.data(1) + i * n, ntt[i]);
        }
        out.is_ntt_form() = true;
        out.scale() = h.scale;
        out.correction_factor() = 1;
        if (!seal::is_valid_for(out, levels.context()))
            throw std::invalid_argument("the expanded ciphertext is not valid for this context");
    }

    void compact_ciphertext(
        seal::Ciphertext ct, const Levels &levels, size_t level, int drop0, int drop1,
        const seal::prng_seed_type *seed, seal::prng_type prng, std::vector<uint8_t> &out)
    {
        if (ct.size() != 2)
            throw std::invalid_argument(
                "only two-component ciphertexts are stored compact (this one has " + std::to_string(ct.size()) +
                "; relinearize it first)");
        if (!ct.is_ntt_form())
            throw std::invalid_argument("the ciphertext is not in NTT form (not a CKKS ciphertext)");
        const int have = levels.level_of(ct.parms_id());
        if (have < 0)
            throw std::invalid_argument("the ciphertext is not at a data level of this context");
        if (level < static_cast<size_t>(have))
            throw std::invalid_argument(
                "the ciphertext is at level " + std::to_string(have) + "; it cannot be stored at the higher level " +
                std::to_string(level));
        const auto &cd = levels.at(level);
        if (level > static_cast<size_t>(have))
        {
            if (seed)
                throw std::invalid_argument("a seed describes c1 at the ciphertext's own level only");
            seal::Evaluator(levels.context()).mod_switch_to_inplace(ct, cd.parms_id());
        }
        const auto &parms = cd.parms();
        const auto &primes = parms.coeff_modulus();
        const size_t n = parms.poly_modulus_degree();
        if (drop0 < 0 || drop1 < 0 || drop0 > 62 || drop1 > 62)
            throw std::invalid_argument("dropped bits must lie in 0..62");
        CompactHeader h;
        h.flags = (seed ? FLAG_SEEDED : 0) | ((drop0 || drop1) ? FLAG_COEFF : 0);
        h.level = static_cast<uint8_t>(level);
        h.primes = static_cast<uint8_t>(primes.size());
        h.drop0 = static_cast<uint8_t>(drop0);
        h.drop1 = static_cast<uint8_t>(seed ? 0 : drop1);
        if (seed && drop1)
            throw std::invalid_argument("a seeded ciphertext keeps c1 as its seed: drop1 must be 0");
        h.log_n = static_cast<uint8_t>(bit_length(n) - 1);
        h.prng = seed ? static_cast<uint8_t>(prng) : 0;
        h.tag = Levels::tag(cd.parms_id());
        h.scale = ct.scale();
        if ((drop0 || drop1) && primes.size() != 1)
            throw std::invalid_argument(
                "dropping bits is defined at a one-prime level; level " + std::to_string(level) + " has " +
                std::to_string(primes.size()) + " primes (store at the last level, or drop none)");
        for (auto &q : primes)
            if (stored_width(q.value(), drop0) < 1 || stored_width(q.value(), h.drop1) < 1)
                throw std::invalid_argument("cannot drop that many bits of a " + std::to_string(bit_length(q.value())) +
                                            "-bit prime");
        if (h.flags & FLAG_COEFF)
        {
            const auto ntt = cd.small_ntt_tables();
            for (size_t c = 0; c < (seed ? 1u : 2u); c++)
                for (size_t i = 0; i < primes.size(); i++)
                    seal::util::inverse_ntt_negacyclic_harvey(ct.data(c) + i * n, ntt[i]);
        }
        write_compact(h, primes, n, ct.data(0), seed ? nullptr : ct.data(1), seed, out);
    }
} // namespace hepix
