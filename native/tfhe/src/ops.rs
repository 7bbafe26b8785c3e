//! The pixel operations the module evaluates, parsed from Python arguments.
use std::fmt;

#[derive(Clone, Debug)]
pub enum Op {
    /// `(x + c) mod 256`
    AddWrap(u8),
    /// `min(255, max(0, x + c))`, `c` in -255..=255
    AddSat(i32),
    /// `x >= t ? 255 : 0`
    GeMask(u8),
    /// `min(x, c)`
    Min(u8),
    /// `max(x, c)`
    Max(u8),
    /// `table[x]`
    Table(Box<[u8; 256]>),
}

pub const NAMES: &str = "add-wrap, add-sat, ge-mask, min, max, table";

impl Op {
    /// The operation `name` with its constant (or table).
    pub fn parse(name: &str, constant: i64, table: Option<&[u8]>) -> Result<Op, String> {
        let byte = |what: &str| {
            u8::try_from(constant).map_err(|_| format!("{name}: the {what} must lie in 0..=255, got {constant}"))
        };
        if name != "table" && table.is_some() {
            return Err(format!("{name} takes a constant, not a table; pass the table to op 'table'"));
        }
        Ok(match name {
            "add-wrap" => Op::AddWrap(byte("constant (mod 256)")?),
            "add-sat" => {
                if !(-255..=255).contains(&constant) {
                    return Err(format!("add-sat: the constant must lie in -255..=255, got {constant}"));
                }
                Op::AddSat(constant as i32)
            }
            "ge-mask" => Op::GeMask(byte("threshold")?),
            "min" => Op::Min(byte("constant")?),
            "max" => Op::Max(byte("constant")?),
            "table" => {
                let t = table.ok_or("table: pass the 256 output values as table=bytes")?;
                let t: [u8; 256] = t
                    .try_into()
                    .map_err(|_| format!("table: a table holds 256 values (one per input 0..=255), got {}", t.len()))?;
                Op::Table(Box::new(t))
            }
            other => return Err(format!("unknown operation {other:?}; expected one of {NAMES}")),
        })
    }

    /// The plaintext function, for every input.
    pub fn table(&self) -> [u8; 256] {
        std::array::from_fn(|x| self.apply(x as u8))
    }

    pub fn apply(&self, x: u8) -> u8 {
        match self {
            Op::AddWrap(c) => x.wrapping_add(*c),
            Op::AddSat(c) => (i32::from(x) + c).clamp(0, 255) as u8,
            Op::GeMask(t) => if x >= *t { 255 } else { 0 },
            Op::Min(c) => x.min(*c),
            Op::Max(c) => x.max(*c),
            Op::Table(t) => t[x as usize],
        }
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Op::AddWrap(c) => write!(f, "add-wrap {c}"),
            Op::AddSat(c) => write!(f, "add-sat {c}"),
            Op::GeMask(t) => write!(f, "ge-mask {t}"),
            Op::Min(c) => write!(f, "min {c}"),
            Op::Max(c) => write!(f, "max {c}"),
            Op::Table(_) => write!(f, "table"),
        }
    }
}
