//! The same operations through tfhe-rs's own integer circuits, kept to measure `circuits.rs`
//! against (and as a cross-check: both must give the same plaintext).
use tfhe::integer::{BooleanBlock, RadixCiphertext, ServerKey as IntKey};
use tfhe::MatchValues;

use crate::ops::Op;

/// Radix blocks of an `FheUint8` under the default parameters (2 bits each).
pub const BLOCKS: usize = 4;

fn trivial(sk: &IntKey, v: u8) -> RadixCiphertext {
    sk.create_trivial_radix(v, BLOCKS)
}

fn select(sk: &IntKey, cond: &BooleanBlock, yes: &RadixCiphertext, no: &RadixCiphertext) -> RadixCiphertext {
    sk.cmux_parallelized(cond, yes, no)
}

/// `op` on one clean pixel with tfhe-rs's circuits: `overflowing_add` + `if_then_else` for the
/// saturating add, `scalar_ge` + `if_then_else` for the mask, `scalar_min`/`scalar_max`, and
/// `match_value` over all 256 inputs for a table.
pub fn eval(sk: &IntKey, op: &Op, ct: &RadixCiphertext) -> RadixCiphertext {
    match op {
        Op::AddWrap(c) => sk.scalar_add_parallelized(ct, *c),
        Op::AddSat(c) if *c > 0 => {
            let (sum, overflow) = sk.unsigned_overflowing_scalar_add_parallelized(ct, *c as u8);
            select(sk, &overflow, &trivial(sk, 255), &sum)
        }
        Op::AddSat(c) if *c < 0 => {
            let (diff, borrow) = sk.unsigned_overflowing_scalar_sub_parallelized(ct, (-*c) as u8);
            select(sk, &borrow, &trivial(sk, 0), &diff)
        }
        Op::AddSat(_) => ct.clone(),
        Op::GeMask(t) => select(sk, &sk.scalar_ge_parallelized(ct, *t), &trivial(sk, 255), &trivial(sk, 0)),
        Op::Min(c) => sk.scalar_min_parallelized(ct, *c),
        Op::Max(c) => sk.scalar_max_parallelized(ct, *c),
        Op::Table(t) => {
            let matches = MatchValues::new((0..256u16).map(|x| (x, u16::from(t[x as usize]))).collect())
                .expect("the inputs 0..255 are distinct");
            let (out, _matched) = sk.match_value_parallelized(ct, &matches);
            sk.cast_to_unsigned(out, BLOCKS)
        }
    }
}

/// The same as [`eval`] for the saturating add, as `min(x, 255 - c) + c` (or `max(x, -c) - (-c)`).
pub fn eval_min_add(sk: &IntKey, op: &Op, ct: &RadixCiphertext) -> RadixCiphertext {
    match op {
        Op::AddSat(c) if *c > 0 => sk.scalar_add_parallelized(&sk.scalar_min_parallelized(ct, 255 - *c as u8), *c as u8),
        Op::AddSat(c) if *c < 0 => {
            let d = (-*c) as u8;
            sk.scalar_sub_parallelized(&sk.scalar_max_parallelized(ct, d), d)
        }
        _ => eval(sk, op, ct),
    }
}
