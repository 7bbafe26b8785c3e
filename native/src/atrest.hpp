// hepix's compact at-rest format for CKKS ciphertexts (see atrest.cpp for the byte layout).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "seal/seal.h"

namespace hepix
{
    //: The four bytes every compact ciphertext starts with.  A SEAL serialization starts with
    //: SEAL's magic 0xA15E (bytes 5E A1), so the two never collide.
    constexpr std::uint8_t COMPACT_MAGIC[4] = { 'H', 'P', 'X', 'C' };
    constexpr std::uint8_t COMPACT_VERSION = 1;
    constexpr std::size_t COMPACT_HEADER_SIZE = 24;
    constexpr std::uint8_t FLAG_SEEDED = 1; // c1 is stored as the 64-byte seed it is expanded from
    constexpr std::uint8_t FLAG_COEFF = 2;  // stored polynomials are in coefficient (not NTT) form
    constexpr std::uint8_t KNOWN_FLAGS = FLAG_SEEDED | FLAG_COEFF;

    struct CompactHeader
    {
        std::uint8_t flags = 0;
        std::uint8_t level = 0;  // primes dropped from the first data level (0: a fresh ciphertext's level)
        std::uint8_t primes = 0; // primes at that level
        std::uint8_t drop0 = 0;  // low bits dropped from c0 (coefficient form, one prime only)
        std::uint8_t drop1 = 0;  // low bits dropped from c1 (0 when seeded)
        std::uint8_t log_n = 0;
        std::uint8_t prng = 0; // seal::prng_type of the seed (seeded only)
        std::uint32_t tag = 0; // the low 32 bits of the level's parms_id
        double scale = 0.0;
    };

    // A SEAL context and what the format needs of it: the levels, their primes and NTT tables.
    class Levels
    {
    public:
        explicit Levels(std::shared_ptr<seal::SEALContext> context);

        const seal::SEALContext &context() const
        {
            return *context_;
        }

        std::size_t count() const
        {
            return levels_.size();
        }

        // The context data of a level (0 = first data level); std::invalid_argument when out of range.
        const seal::SEALContext::ContextData &at(std::size_t level) const;

        // The level of a parms_id, or -1 when it is not a data level of this context.
        int level_of(const seal::parms_id_type &parms_id) const;

        static std::uint32_t tag(const seal::parms_id_type &parms_id)
        {
            return static_cast<std::uint32_t>(parms_id[0] & 0xFFFFFFFFULL);
        }

    private:
        std::shared_ptr<seal::SEALContext> context_;
        std::vector<std::shared_ptr<const seal::SEALContext::ContextData>> levels_;
    };

    // Bit width of the stored residues of prime q after dropping `drop` low bits.
    int stored_width(std::uint64_t q, int drop);

    // Bytes of one stored polynomial (all primes of the level).
    std::size_t packed_poly_bytes(const std::vector<seal::Modulus> &primes, std::size_t n, int drop);

    // Total bytes of a compact ciphertext with this header.
    std::size_t compact_size(const CompactHeader &h, const std::vector<seal::Modulus> &primes, std::size_t n);

    // Writes a compact ciphertext.  c0 (and c1 unless `seed` is given) are RNS polynomials of the
    // level in the domain the header's FLAG_COEFF says; their residues must be < q.  Rounding:
    // a coefficient c is stored as floor(c / 2^drop) (see atrest.cpp).
    void write_compact(
        const CompactHeader &h, const std::vector<seal::Modulus> &primes, std::size_t n, const std::uint64_t *c0,
        const std::uint64_t *c1, const seal::prng_seed_type *seed, std::vector<std::uint8_t> &out);

    // Parses and checks a header against the context; std::invalid_argument naming what is wrong.
    CompactHeader read_header(const std::uint8_t *data, std::size_t size, const Levels &levels);

    // Rebuilds the SEAL ciphertext of compact bytes (checked: header, sizes, every value < q).
    void expand_compact(const std::uint8_t *data, std::size_t size, const Levels &levels, seal::Ciphertext &out);

    // Compacts a loaded ciphertext at `level` (mod-switched down when it is higher), keeping `seed`
    // when given (the ciphertext's c1 must then be its expansion at that level).
    void compact_ciphertext(
        seal::Ciphertext ct, const Levels &levels, std::size_t level, int drop0, int drop1,
        const seal::prng_seed_type *seed, seal::prng_type prng, std::vector<std::uint8_t> &out);
} // namespace hepix
