//! Exact 8-bit pixel operations as short circuits of programmable bootstraps (PBS).
//!
//! A pixel is an `FheUint8` with the default 2_2 parameters: four radix blocks `b0..b3` of two
//! message bits each, plus two carry bits of room.  A block with empty carries can be packed with
//! another into one 4-bit value without any bootstrap (`lo + 4 * hi` is a scalar multiplication
//! and an addition of LWE ciphertexts), and one PBS evaluates any function of those 4 bits.  So
//! the circuits here work on the two nibbles `L = b0 + 4 b1` and `H = b2 + 4 b3`, and on small
//! states (a comparison result, a carry) packed next to a block in the same way.
//!
//! Every packing below keeps the degree of the packed value within the 4-bit space (<= 15) and
//! its noise level within the parameters' bound (a fresh or bootstrapped block has level 1;
//! `lo + k * hi` has level `1 + k`, at most 5 for these parameters), so every PBS input is one
//! the parameters guarantee; the comments give the figures.  Every output block is a PBS output
//! (or a copy of one) with a degree of at most 3: the results are clean and can be fed to the
//! next operation as they are.
//!
//! PBS counts per pixel (the cost driver; the tfhe-rs circuits they replace are in `library.rs`):
//! threshold 3, min/max 7, wrapping add 5, saturating add 9, an arbitrary table at most 164
//! (fewer when parts of the table are constant).
use std::collections::HashMap;

use tfhe::shortint::server_key::{LookupTableOwned, ManyLookupTableOwned};
use tfhe::shortint::{Ciphertext as Block, ServerKey as ShortKey};

/// `lo + k * hi`, without bootstrapping (the caller checks degree and noise).
fn pack(sk: &ShortKey, lo: &Block, hi: &Block, k: u8) -> Block {
    let mut r = sk.unchecked_scalar_mul(hi, k);
    sk.unchecked_add_assign(&mut r, lo);
    r
}

fn pbs(sk: &ShortKey, ct: &Block, lut: &LookupTableOwned) -> Block {
    sk.apply_lookup_table(ct, lut)
}

/// Digit `j` (two bits) of `v`.
fn digit(v: u64, j: usize) -> u64 {
    (v >> (2 * j)) & 3
}

/// The comparison of a pixel with a public constant `c`, as one block holding 1 or 0.
///
/// `sH` (one PBS on `H`) says whether the high nibble is below, equal to or above `c`'s;
/// `lL` (one PBS on `L`) whether the low nibble passes the low-nibble test; a third PBS on
/// `lL + 2 sH` (degree 1 + 4 = 5, noise 1 + 2 = 3) combines them.
pub struct Compare {
    high: LookupTableOwned,
    low: LookupTableOwned,
    combine: LookupTableOwned,
}

#[derive(Clone, Copy)]
enum Relation {
    /// `x >= c`
    Ge,
    /// `x < c`
    Lt,
    /// `x > c`
    Gt,
}

impl Compare {
    fn new(sk: &ShortKey, c: u8, rel: Relation, true_value: u64) -> Self {
        let (ch, cl) = (u64::from(c >> 4), u64::from(c & 15));
        let high = sk.generate_lookup_table(move |h| match h.cmp(&ch) {
            std::cmp::Ordering::Less => 0,
            std::cmp::Ordering::Equal => 1,
            std::cmp::Ordering::Greater => 2,
        });
        let low = sk.generate_lookup_table(move |l| match rel {
            Relation::Ge => u64::from(l >= cl),
            Relation::Lt => u64::from(l < cl),
            Relation::Gt => u64::from(l > cl),
        });
        let combine = sk.generate_lookup_table(move |v| {
            let (s, l) = (v >> 1, v & 1);
            let holds = match rel {
                Relation::Ge | Relation::Gt => s == 2 || (s == 1 && l == 1),
                Relation::Lt => s == 0 || (s == 1 && l == 1),
            };
            if holds {
                true_value
            } else {
                0
            }
        });
        Self { high, low, combine }
    }

    fn eval(&self, sk: &ShortKey, lo: &Block, hi: &Block) -> Block {
        let s = pbs(sk, hi, &self.high);
        let l = pbs(sk, lo, &self.low);
        pbs(sk, &pack(sk, &l, &s, 2), &self.combine)
    }
}

/// One compiled pixel operation: its lookup tables, built once per batch.
pub enum Circuit {
    /// `x >= t ? 255 : 0` (3 PBS): the comparison block, holding 3 or 0, copied into all blocks.
    GeMask(Compare),
    /// `min(x, c)` or `max(x, c)` (7 PBS).
    MinMax {
        /// The high nibble of the result is `min(H, cH)` (resp. max) whatever `L` is.
        high: [LookupTableOwned; 2],
        /// Whether `x` itself is kept (`x < c` for min, `x > c` for max).
        keep: Compare,
        /// `keep ? b : c_j` on `b + 4 keep` (degree 3 + 4 = 7, noise 5), for blocks 0 and 1.
        select: [LookupTableOwned; 2],
    },
    /// `(x + c) mod 256` (5 PBS): a ripple over the two nibbles.
    AddWrap {
        out0: LookupTableOwned,
        out1: LookupTableOwned,
        carry_l: LookupTableOwned,
        /// On `b2 + 4 k` (degree 7, noise 5): block 2 and its carry, two tables in one PBS.
        block2: ManyLookupTableOwned,
        out3: LookupTableOwned,
    },
    /// `min(255, max(0, x + c))` (9 PBS).
    AddSat(AddSat),
    /// Any table of 256 values (at most 164 PBS).
    Table(Box<[u8; 256]>),
    /// The pixel as it is (no PBS): adding 0.
    Identity,
}

/// Saturating addition of `c != 0`: add `c mod 256`, and where the carry out of the top block
/// says the true sum left 0..255 (a carry for `c > 0`, none for `c < 0`) replace every block
/// with the bound.  The state `z` (0/1: the carry into the high nibble, 2: saturated) rides
/// next to each block: `b + 4 z` has degree 3 + 8 = 11 and noise 5.
pub struct AddSat {
    state_h: LookupTableOwned,
    carry_l: LookupTableOwned,
    raw1: LookupTableOwned,
    state: LookupTableOwned,
    out0: LookupTableOwned,
    out1: LookupTableOwned,
    out2: LookupTableOwned,
    state2: LookupTableOwned,
    out3: LookupTableOwned,
}

impl AddSat {
    fn new(sk: &ShortKey, c: i32) -> Self {
        let cp = c.rem_euclid(256) as u64;
        let positive = c > 0;
        let fill = if positive { 3 } else { 0 };
        let (cl, ch) = (cp & 15, cp >> 4);
        let (c0, c2, c3) = (digit(cp, 0), digit(cp, 2), digit(cp, 3));
        Self {
            // 2: the high nibble overflows by itself; 1: it overflows iff the low one carries.
            state_h: sk.generate_lookup_table(move |h| {
                if h + ch >= 16 {
                    2
                } else if h + ch == 15 {
                    1
                } else {
                    0
                }
            }),
            carry_l: sk.generate_lookup_table(move |l| (l + cl) >> 4),
            raw1: sk.generate_lookup_table(move |l| digit(l + cl, 1)),
            // On k + 2 sH (degree 5, noise 3).
            state: sk.generate_lookup_table(move |v| {
                let (s, k) = (v >> 1, v & 1);
                let carry_out = s == 2 || (s == 1 && k == 1);
                if carry_out == positive {
                    2
                } else {
                    k
                }
            }),
            out0: sk.generate_lookup_table(move |v| if v >> 2 == 2 { fill } else { ((v & 3) + c0) & 3 }),
            out1: sk.generate_lookup_table(move |v| if v >> 2 == 2 { fill } else { v & 3 }),
            out2: sk.generate_lookup_table(move |v| {
                let z = v >> 2;
                if z == 2 {
                    fill
                } else {
                    ((v & 3) + c2 + z) & 3
                }
            }),
            state2: sk.generate_lookup_table(move |v| {
                let z = v >> 2;
                if z == 2 {
                    2
                } else {
                    ((v & 3) + c2 + z) >> 2
                }
            }),
            out3: sk.generate_lookup_table(move |v| {
                let z = v >> 2;
                if z == 2 {
                    fill
                } else {
                    ((v & 3) + c3 + z) & 3
                }
            }),
        }
    }

    fn eval(&self, sk: &ShortKey, b: &[Block]) -> Vec<Block> {
        let lo = pack(sk, &b[0], &b[1], 4);
        let hi = pack(sk, &b[2], &b[3], 4);
        let s = pbs(sk, &hi, &self.state_h);
        let k = pbs(sk, &lo, &self.carry_l);
        let p1 = pbs(sk, &lo, &self.raw1);
        let z = pbs(sk, &pack(sk, &k, &s, 2), &self.state);
        let b2z = pack(sk, &b[2], &z, 4);
        let z2 = pbs(sk, &b2z, &self.state2);
        vec![
            pbs(sk, &pack(sk, &b[0], &z, 4), &self.out0),
            pbs(sk, &pack(sk, &p1, &z, 4), &self.out1),
            pbs(sk, &b2z, &self.out2),
            pbs(sk, &pack(sk, &b[3], &z2, 4), &self.out3),
        ]
    }
}

impl Circuit {
    pub fn ge_mask(sk: &ShortKey, t: u8) -> Self {
        Circuit::GeMask(Compare::new(sk, t, Relation::Ge, 3))
    }

    pub fn min(sk: &ShortKey, c: u8) -> Self {
        Self::min_max(sk, c, true)
    }

    pub fn max(sk: &ShortKey, c: u8) -> Self {
        Self::min_max(sk, c, false)
    }

    fn min_max(sk: &ShortKey, c: u8, is_min: bool) -> Self {
        let ch = u64::from(c >> 4);
        let cv = u64::from(c);
        let nib = move |h: u64| if is_min { h.min(ch) } else { h.max(ch) };
        let sel = |j: usize| sk.generate_lookup_table(move |v| if v >> 2 == 1 { v & 3 } else { digit(cv, j) });
        Circuit::MinMax {
            high: [sk.generate_lookup_table(move |h| nib(h) & 3), sk.generate_lookup_table(move |h| nib(h) >> 2)],
            keep: Compare::new(sk, c, if is_min { Relation::Lt } else { Relation::Gt }, 1),
            select: [sel(0), sel(1)],
        }
    }

    pub fn add_wrap(sk: &ShortKey, c: u8) -> Self {
        if c == 0 {
            return Circuit::Identity;
        }
        let c = u64::from(c);
        let cl = c & 15;
        let (c0, c2, c3) = (digit(c, 0), digit(c, 2), digit(c, 3));
        let sum2 = move |v: u64| (v & 3) + c2 + (v >> 2);
        Circuit::AddWrap {
            out0: sk.generate_lookup_table(move |v| (v + c0) & 3),
            out1: sk.generate_lookup_table(move |l| digit(l + cl, 1)),
            carry_l: sk.generate_lookup_table(move |l| (l + cl) >> 4),
            block2: sk.generate_many_lookup_table(&[&move |v| sum2(v) & 3, &move |v| sum2(v) >> 2]),
            out3: sk.generate_lookup_table(move |v| ((v & 3) + c3 + (v >> 2)) & 3),
        }
    }

    /// `c` in -255..=255; 0 is the identity (a copy, no PBS).
    pub fn add_sat(sk: &ShortKey, c: i32) -> Self {
        if c == 0 {
            return Circuit::Identity;
        }
        Circuit::AddSat(AddSat::new(sk, c))
    }

    pub fn table(table: [u8; 256]) -> Self {
        Circuit::Table(Box::new(table))
    }

    /// The operation on one pixel's four clean blocks.
    pub fn eval(&self, sk: &ShortKey, b: &[Block]) -> Vec<Block> {
        match self {
            Circuit::GeMask(cmp) => {
                let lo = pack(sk, &b[0], &b[1], 4);
                let hi = pack(sk, &b[2], &b[3], 4);
                let m = cmp.eval(sk, &lo, &hi);
                vec![m.clone(), m.clone(), m.clone(), m]
            }
            Circuit::MinMax { high, keep, select } => {
                let lo = pack(sk, &b[0], &b[1], 4);
                let hi = pack(sk, &b[2], &b[3], 4);
                let k = keep.eval(sk, &lo, &hi);
                vec![
                    pbs(sk, &pack(sk, &b[0], &k, 4), &select[0]),
                    pbs(sk, &pack(sk, &b[1], &k, 4), &select[1]),
                    pbs(sk, &hi, &high[0]),
                    pbs(sk, &hi, &high[1]),
                ]
            }
            Circuit::AddWrap { out0, out1, carry_l, block2, out3 } => {
                let lo = pack(sk, &b[0], &b[1], 4);
                let k = pbs(sk, &lo, carry_l);
                let mut two = sk.apply_many_lookup_table(&pack(sk, &b[2], &k, 4), block2);
                let t = two.pop().expect("two tables give two blocks");
                let o2 = two.pop().expect("two tables give two blocks");
                vec![pbs(sk, &b[0], out0), pbs(sk, &lo, out1), o2, pbs(sk, &pack(sk, &b[3], &t, 4), out3)]
            }
            Circuit::AddSat(a) => a.eval(sk, b),
            Circuit::Table(t) => eval_table(sk, t, b),
            Circuit::Identity => b.to_vec(),
        }
    }
}

/// A block that is either a public constant (no PBS spent on it) or an encrypted block.
#[derive(Clone)]
enum Val {
    Known(u64),
    Enc(Block),
}

/// `T[x]` for an arbitrary table, as a selection tree over the nibbles.
///
/// 1. For each high nibble h (16) and output block j (4): `T[16h + L]`'s digit j, one PBS on `L`
///    (a function of `L` that is constant costs nothing, equal functions are computed once).
/// 2. For each value g of `b3` and block j: pick the candidate of `b2` among four, as the sum of
///    `[b2 == k] * v_k`; each encrypted candidate costs one PBS on `v_k + 4 b2` (degree 15,
///    noise 5); the known ones together cost one PBS on `b2`.  The sum (at most 4 terms, noise
///    <= 4) is cleaned by one more PBS unless it is a single term.
/// 3. The same over `b3` for each block j.
fn eval_table(sk: &ShortKey, t: &[u8; 256], b: &[Block]) -> Vec<Block> {
    let lo = pack(sk, &b[0], &b[1], 4);
    let mut memo: HashMap<[u8; 16], Block> = HashMap::new();
    let mut level1: Vec<[Val; 4]> = Vec::with_capacity(16);
    for h in 0..16usize {
        level1.push(std::array::from_fn(|j| {
            let f: [u8; 16] = std::array::from_fn(|l| digit(u64::from(t[16 * h + l]), j) as u8);
            if f.iter().all(|&v| v == f[0]) {
                return Val::Known(u64::from(f[0]));
            }
            Val::Enc(
                memo.entry(f)
                    .or_insert_with(|| pbs(sk, &lo, &sk.generate_lookup_table(|l| u64::from(f[l as usize]))))
                    .clone(),
            )
        }));
    }
    let mut level2: Vec<[Val; 4]> = Vec::with_capacity(4);
    for g in 0..4usize {
        level2.push(std::array::from_fn(|j| {
            let cands: [Val; 4] = std::array::from_fn(|k| level1[4 * g + k][j].clone());
            select(sk, &cands, &b[2])
        }));
    }
    (0..4)
        .map(|j| {
            let cands: [Val; 4] = std::array::from_fn(|g| level2[g][j].clone());
            match select(sk, &cands, &b[3]) {
                Val::Known(v) => sk.create_trivial(v),
                Val::Enc(ct) => ct,
            }
        })
        .collect()
}

/// `cands[d]` where `d` is the value of the clean block `d_ct`; the result is clean.
fn select(sk: &ShortKey, cands: &[Val; 4], d_ct: &Block) -> Val {
    if let Val::Known(v0) = cands[0] {
        if cands.iter().all(|c| matches!(c, Val::Known(v) if *v == v0)) {
            return Val::Known(v0);
        }
    }
    let known: [u64; 4] = std::array::from_fn(|k| if let Val::Known(v) = cands[k] { v } else { 0 });
    let mut terms: Vec<Block> = Vec::new();
    if known.iter().any(|&v| v != 0) {
        terms.push(pbs(sk, d_ct, &sk.generate_lookup_table(|d| if d < 4 { known[d as usize] } else { 0 })));
    }
    for (k, c) in cands.iter().enumerate() {
        if let Val::Enc(v) = c {
            let k = k as u64;
            let lut = sk.generate_lookup_table(move |x| if x >> 2 == k { x & 3 } else { 0 });
            terms.push(pbs(sk, &pack(sk, v, d_ct, 4), &lut));
        }
    }
    let mut acc = terms.pop().expect("not all candidates are known and equal");
    if terms.is_empty() {
        return Val::Enc(acc);
    }
    for term in &terms {
        sk.unchecked_add_assign(&mut acc, term);
    }
    // Exactly one term is non-zero, so the sum is at most 3: cleaning keeps the low two bits.
    Val::Enc(pbs(sk, &acc, &sk.generate_lookup_table(|v| v & 3)))
}
