//! hepix_tfhe: 8-bit encrypted pixels over tfhe-rs (TFHE), for hepix.
//!
//! Keys, encryption and decryption of batches of pixels (one `FheUint8` per value, or a seeded
//! `CompressedFheUint8`, or a `CompressedCiphertextList` per batch, or with the compact public key
//! a `CompactCiphertextList` per value), and exact pixel operations on ciphertexts with the
//! server key.  Every batch call releases the GIL and runs on a local
//! rayon pool of `threads` threads (default 1: one per Spark task, which already runs one task
//! per core).  Bytes cross the boundary, through tfhe-rs's safe serialization; a ciphertext that
//! does not deserialize, or is not conformant with the key's parameters, raises ValueError
//! naming its index.
use std::collections::HashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Mutex, OnceLock};

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::pybacked::PyBackedBytes;
use pyo3::types::{PyBytes, PyList};
use rayon::prelude::*;
use rayon::ThreadPool;
use tfhe::integer::{IntegerCiphertext, RadixCiphertext};
use tfhe::shortint::ciphertext::{Degree, NoiseLevel};
use tfhe::prelude::*;
use tfhe::shortint::parameters::{
    CompactPublicKeyEncryptionParameters, COMP_PARAM_MESSAGE_2_CARRY_2_KS_PBS_TUNIFORM_2M128,
    PARAM_KEYSWITCH_MESSAGE_2_CARRY_2_KS_PBS_TUNIFORM_2M128, PARAM_MESSAGE_2_CARRY_2_KS_PBS_TUNIFORM_2M128,
    PARAM_PKE_MESSAGE_2_CARRY_2_KS_PBS_TUNIFORM_2M128,
};
use tfhe::{
    CompactCiphertextList, CompactCiphertextListConformanceParams, CompactPublicKey,
    CompressedCiphertextListBuilder, CompressedFheUint8, CompressedFheUint8ConformanceParams,
    CompressedServerKey, ConfigBuilder, FheUint8, FheUint8ConformanceParams, ReRandomizationMetadata,
};

mod circuits;
mod codec;
mod library;
mod ops;

use circuits::Circuit;
use codec::Pixel;
use ops::Op;

/// The public-key encryption parameters of the compact public key `keygen` makes: tfhe-rs's
/// dedicated parameters for 2-bit blocks, whose ciphertexts the server key casts (a key switch
/// and a bootstrap per block) to the computation parameters.
const PKE: CompactPublicKeyEncryptionParameters = PARAM_PKE_MESSAGE_2_CARRY_2_KS_PBS_TUNIFORM_2M128;

/// Largest thread count a call accepts.
const MAX_THREADS: usize = 256;

/// Circuits `ServerKey.apply` can evaluate an operation with.
const CIRCUITS: &str = "nibble, table, tfhe-rs, tfhe-rs-min-add, tfhe-rs-table";

fn pool(threads: usize) -> PyResult<Arc<ThreadPool>> {
    if threads == 0 || threads > MAX_THREADS {
        return Err(PyValueError::new_err(format!(
            "threads must lie in 1..={MAX_THREADS}, got {threads}; use 1 per Spark task"
        )));
    }
    static POOLS: OnceLock<Mutex<HashMap<usize, Arc<ThreadPool>>>> = OnceLock::new();
    let mut pools = POOLS.get_or_init(Default::default).lock().unwrap_or_else(|e| e.into_inner());
    if let Some(p) = pools.get(&threads) {
        return Ok(p.clone());
    }
    let p = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .thread_name(|i| format!("hepix-tfhe-{i}"))
        .build()
        .map_err(|e| PyValueError::new_err(format!("cannot start {threads} threads: {e}")))?;
    let p = Arc::new(p);
    pools.insert(threads, p.clone());
    Ok(p)
}

/// `f(i)` for every `i < n` on `pool`; a failure (or a panic) of item `i` becomes
/// `"{what} {i}: {message}"` for the lowest such `i`.
fn batch<T: Send>(
    pool: &ThreadPool,
    n: usize,
    what: &str,
    f: impl Fn(usize) -> Result<T, String> + Sync,
) -> Result<Vec<T>, String> {
    let results: Vec<Result<T, String>> = pool.install(|| {
        (0..n)
            .into_par_iter()
            .map(|i| match catch_unwind(AssertUnwindSafe(|| f(i))) {
                Ok(r) => r,
                Err(panic) => Err(panic_message(&panic)),
            })
            .collect()
    });
    results
        .into_iter()
        .enumerate()
        .map(|(i, r)| r.map_err(|e| format!("{what} {i}: {e}")))
        .collect()
}

fn panic_message(panic: &Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = panic.downcast_ref::<&str>() {
        format!("rejected by tfhe-rs ({s})")
    } else if let Some(s) = panic.downcast_ref::<String>() {
        format!("rejected by tfhe-rs ({s})")
    } else {
        "rejected by tfhe-rs".into()
    }
}

fn value_error(e: String) -> PyErr {
    PyValueError::new_err(e)
}

fn bytes_list(py: Python<'_>, items: Vec<Vec<u8>>) -> PyResult<Py<PyList>> {
    Ok(PyList::new(py, items.iter().map(|b| PyBytes::new(py, b)))?.unbind())
}

fn encrypt(v: u8, key: &tfhe::ClientKey) -> Result<FheUint8, String> {
    FheUint8::try_encrypt(v, key).map_err(|e| e.to_string())
}

/// Conformance parameters of pixel ciphertexts under one key.
#[derive(Clone)]
struct Conformance {
    full: FheUint8ConformanceParams,
    seeded: CompressedFheUint8ConformanceParams,
    compact: CompactCiphertextListConformanceParams,
}

impl Conformance {
    /// The parameters of the keys `keygen` makes, known without a key.
    fn of_keygen() -> Self {
        Self::of(PARAM_MESSAGE_2_CARRY_2_KS_PBS_TUNIFORM_2M128.into(), PARAM_MESSAGE_2_CARRY_2_KS_PBS_TUNIFORM_2M128.into())
    }

    fn of(full: FheUint8ConformanceParams, seeded: CompressedFheUint8ConformanceParams) -> Self {
        Self { full, seeded, compact: codec::compact_conformance(PKE) }
    }

    fn forms(&self) -> codec::Forms<'_> {
        codec::Forms { full: &self.full, seeded: &self.seeded, compact: &self.compact }
    }

    /// A pixel ciphertext ready to compute on: a public-key one is cast with `server` (its
    /// key-switching key), and must then be conformant like any other.
    fn pixel(&self, bytes: &[u8], server: Option<&tfhe::ServerKey>) -> Result<FheUint8, String> {
        match codec::pixel(bytes, &self.forms())? {
            Pixel::Ready(ct) => Ok(ct),
            Pixel::Compact(list) => match server {
                Some(sk) => self.cast(&list, sk),
                None => Err("a public-key ciphertext (CompactCiphertextList) is cast by the server key before it \
                             can be decrypted: process it first, or decrypt with the server key"
                    .into()),
            },
        }
    }

    fn cast(&self, list: &CompactCiphertextList, sk: &tfhe::ServerKey) -> Result<FheUint8, String> {
        let expander = list.expand_with_key(sk).map_err(|e| format!("cannot cast the public-key ciphertext: {e}"))?;
        let ct = match expander.get::<FheUint8>(0) {
            Ok(Some(ct)) => ct,
            Ok(None) => return Err("the compact list is empty".into()),
            Err(e) => return Err(format!("cannot cast the public-key ciphertext: {e}")),
        };
        if !ct.is_conformant(&self.full) {
            return Err("the cast public-key ciphertext is not conformant with the computation parameters".into());
        }
        Ok(ct)
    }
}

/// Generate a key set: (client key, server key, compressed server key, compact public key),
/// serialized.
///
/// The server key includes the keys that compress and decompress ciphertext lists and the
/// key-switching key that casts compact public-key ciphertexts to the computation parameters.
/// The compressed server key is a seeded form of the same key (what to ship; `ServerKey` accepts
/// either).  The compact public key encrypts (`PublicKey`) and cannot decrypt.  The client key is
/// secret.
#[pyfunction]
#[pyo3(signature = (threads = 1))]
#[allow(clippy::type_complexity)]
fn keygen(py: Python<'_>, threads: usize) -> PyResult<(Py<PyBytes>, Py<PyBytes>, Py<PyBytes>, Py<PyBytes>)> {
    let pool = pool(threads)?;
    let (ck, sk, csk, cpk) = py
        .detach(|| {
            pool.install(|| -> Result<_, String> {
                let config = ConfigBuilder::default()
                    .enable_compression(COMP_PARAM_MESSAGE_2_CARRY_2_KS_PBS_TUNIFORM_2M128)
                    .use_dedicated_compact_public_key_parameters((PKE, PARAM_KEYSWITCH_MESSAGE_2_CARRY_2_KS_PBS_TUNIFORM_2M128))
                    .build();
                let ck = tfhe::ClientKey::generate(config);
                let csk = CompressedServerKey::new(&ck);
                let sk = csk.decompress();
                let cpk = CompactPublicKey::try_new(&ck).map_err(|e| e.to_string())?;
                Ok((
                    codec::client_key_bytes(&ck)?,
                    codec::server_key_bytes(&sk)?,
                    codec::compressed_server_key_bytes(&csk)?,
                    codec::public_key_bytes(&cpk)?,
                ))
            })
        })
        .map_err(|e| value_error(format!("key generation failed: {e}")))?;
    Ok((
        PyBytes::new(py, &ck).unbind(),
        PyBytes::new(py, &sk).unbind(),
        PyBytes::new(py, &csk).unbind(),
        PyBytes::new(py, &cpk).unbind(),
    ))
}

/// Why each of `cts` is not a pixel ciphertext of `keygen`'s parameter set: None for one that
/// deserializes (an `FheUint8` or a seeded `CompressedFheUint8`, within the size limit) and is
/// conformant with the parameters (the checks `ServerKey.apply` and `ClientKey.decrypt` make
/// before they use it), else the message.  Needs no key, so a job checks its input rows before
/// any work and leaves the bad ones out instead of failing a whole batch.
#[pyfunction]
#[pyo3(signature = (cts, threads = 1))]
fn check_pixels(py: Python<'_>, cts: Vec<PyBackedBytes>, threads: usize) -> PyResult<Vec<Option<String>>> {
    let pool = pool(threads)?;
    let conf = Conformance::of_keygen();
    Ok(py.detach(|| {
        pool.install(|| {
            cts.par_iter()
                .map(|b| match catch_unwind(AssertUnwindSafe(|| codec::check_pixel(b, &conf.forms()))) {
                    Ok(r) => r.err(),
                    Err(panic) => Some(panic_message(&panic)),
                })
                .collect()
        })
    }))
}

/// The data owner's (secret) client key: encrypts and decrypts.
#[pyclass(module = "hepix_tfhe", frozen)]
struct ClientKey {
    key: tfhe::ClientKey,
    conf: Conformance,
}

#[pymethods]
impl ClientKey {
    #[new]
    fn new(py: Python<'_>, data: PyBackedBytes) -> PyResult<Self> {
        let key = py
            .detach(|| codec::client_key(&data))
            .map_err(|e| value_error(format!("not a tfhe-rs client key: {e}")))?;
        let params = key.computation_parameters();
        let conf = Conformance::of(params.into(), params.into());
        Ok(Self { key, conf })
    }

    fn __repr__(&self) -> String {
        "<hepix_tfhe.ClientKey (secret)>".into()
    }

    /// One serialized `FheUint8` per byte of `data`.
    #[pyo3(signature = (data, threads = 1))]
    fn encrypt(&self, py: Python<'_>, data: PyBackedBytes, threads: usize) -> PyResult<Py<PyList>> {
        let pool = pool(threads)?;
        let out = py
            .detach(|| batch(&pool, data.len(), "value", |i| codec::to_bytes_ct(&encrypt(data[i], &self.key)?)))
            .map_err(value_error)?;
        bytes_list(py, out)
    }

    /// One serialized seeded `CompressedFheUint8` per byte of `data` (the mask is stored as the
    /// seed it is expanded from; the server expands it before computing).
    #[pyo3(signature = (data, threads = 1))]
    fn encrypt_seeded(&self, py: Python<'_>, data: PyBackedBytes, threads: usize) -> PyResult<Py<PyList>> {
        let pool = pool(threads)?;
        let out = py
            .detach(|| {
                batch(&pool, data.len(), "value", |i| codec::to_bytes_seeded(&CompressedFheUint8::try_encrypt(data[i], &self.key).map_err(|e| e.to_string())?))
            })
            .map_err(value_error)?;
        bytes_list(py, out)
    }

    /// All of `data` in one serialized `CompressedCiphertextList` (needs the server key's
    /// compression key).
    #[pyo3(signature = (data, server_key, threads = 1))]
    fn encrypt_list(&self, py: Python<'_>, data: PyBackedBytes, server_key: &ServerKey, threads: usize) -> PyResult<Py<PyBytes>> {
        let pool = pool(threads)?;
        let out = py
            .detach(|| {
                let cts = batch(&pool, data.len(), "value", |i| encrypt(data[i], &self.key))?;
                server_key.compress_all(&pool, cts)
            })
            .map_err(value_error)?;
        Ok(PyBytes::new(py, &out).unbind())
    }

    /// The values of serialized `FheUint8` or `CompressedFheUint8` ciphertexts, one byte each;
    /// public-key ciphertexts (`CompactCiphertextList`) too when `server_key` is given (it casts
    /// them).
    #[pyo3(signature = (cts, threads = 1, server_key = None))]
    fn decrypt(&self, py: Python<'_>, cts: Vec<PyBackedBytes>, threads: usize, server_key: Option<&ServerKey>) -> PyResult<Py<PyBytes>> {
        let pool = pool(threads)?;
        let sk = server_key.map(|k| &k.key);
        let out = py
            .detach(|| batch(&pool, cts.len(), "ciphertext", |i| Ok(codec::decrypt(&self.conf.pixel(&cts[i], sk)?, &self.key))))
            .map_err(value_error)?;
        Ok(PyBytes::new(py, &out).unbind())
    }

    /// The values of a serialized `CompressedCiphertextList` (decompressing needs the server key).
    #[pyo3(signature = (data, server_key, threads = 1))]
    fn decrypt_list(&self, py: Python<'_>, data: PyBackedBytes, server_key: &ServerKey, threads: usize) -> PyResult<Py<PyBytes>> {
        let pool = pool(threads)?;
        let out = py
            .detach(|| {
                let cts = server_key.expand_all(&pool, &data)?;
                batch(&pool, cts.len(), "list item", |i| Ok(codec::decrypt(&cts[i], &self.key)))
            })
            .map_err(value_error)?;
        Ok(PyBytes::new(py, &out).unbind())
    }
}

/// The public evaluation key: computes on ciphertexts, cannot decrypt.
#[pyclass(module = "hepix_tfhe", frozen)]
struct ServerKey {
    key: tfhe::ServerKey,
    conf: Conformance,
}

enum Evaluation {
    Nibble(Circuit),
    Library(Op),
    LibraryMinAdd(Op),
}

impl ServerKey {
    /// Make the key the tfhe-rs global key of every thread of `pool` (the list compression of
    /// the high-level API reads it from there).
    fn install_key(&self, pool: &ThreadPool) {
        pool.broadcast(|_| tfhe::set_server_key(self.key.clone()));
    }

    fn compress_all(&self, pool: &ThreadPool, cts: Vec<FheUint8>) -> Result<Vec<u8>, String> {
        self.install_key(pool);
        let list = pool.install(|| {
            let mut builder = CompressedCiphertextListBuilder::new();
            for ct in cts {
                builder.push(ct);
            }
            builder.build()
        });
        codec::to_bytes_list(&list.map_err(|e| format!("compression failed: {e}"))?)
    }

    fn expand_all(&self, pool: &ThreadPool, data: &[u8]) -> Result<Vec<FheUint8>, String> {
        let list = codec::list(data).map_err(|e| format!("not a compressed ciphertext list: {e}"))?;
        self.install_key(pool);
        batch(pool, list.len(), "list item", |i| match list.get::<FheUint8>(i) {
            Ok(Some(ct)) => Ok(ct),
            Ok(None) => Err("missing".into()),
            Err(e) => Err(e.to_string()),
        })
    }

    fn evaluation(&self, op: Op, circuit: &str) -> Result<Evaluation, String> {
        let sk: &tfhe::shortint::ServerKey = self.integer().as_ref();
        Ok(match circuit {
            "nibble" => Evaluation::Nibble(match op {
                Op::AddWrap(c) => Circuit::add_wrap(sk, c),
                Op::AddSat(c) => Circuit::add_sat(sk, c),
                Op::GeMask(t) => Circuit::ge_mask(sk, t),
                Op::Min(c) => Circuit::min(sk, c),
                Op::Max(c) => Circuit::max(sk, c),
                Op::Table(t) => Circuit::table(*t),
            }),
            "table" => Evaluation::Nibble(Circuit::table(op.table())),
            "tfhe-rs" => Evaluation::Library(op),
            "tfhe-rs-min-add" => Evaluation::LibraryMinAdd(op),
            "tfhe-rs-table" => Evaluation::Library(Op::Table(Box::new(op.table()))),
            other => return Err(format!("unknown circuit {other:?}; expected one of {CIRCUITS}")),
        })
    }

    fn integer(&self) -> &tfhe::integer::ServerKey {
        self.key.as_ref()
    }

    fn eval_one(&self, how: &Evaluation, bytes: &[u8]) -> Result<Vec<u8>, String> {
        // Conformance guarantees what every circuit here assumes of its input: four blocks, each
        // with degree 3 (empty carries) and nominal noise.
        let (ct, id, tag, _) = self.conf.pixel(bytes, Some(&self.key))?.into_raw_parts();
        let isk = self.integer();
        let mut out: RadixCiphertext = match how {
            Evaluation::Nibble(c) => RadixCiphertext::from_blocks(c.eval(isk.as_ref(), ct.blocks())),
            Evaluation::Library(op) => library::eval(isk, op, &ct),
            Evaluation::LibraryMinAdd(op) => library::eval_min_add(isk, op, &ct),
        };
        // Conformance (on the next load, here or at the owner's) demands exactly degree 3 and
        // nominal noise; a block that is known to hold less (a table whose outputs stay below 3)
        // or a constant block (a trivial ciphertext, noise 0) is declared at those bounds, which
        // over-estimate it and so stay sound.
        let sk: &tfhe::shortint::ServerKey = isk.as_ref();
        let top = Degree::new(sk.message_modulus.0 - 1);
        for block in out.blocks_mut() {
            debug_assert!(block.degree <= top && block.noise_level() <= NoiseLevel::NOMINAL);
            block.degree = top;
            block.set_noise_level_to_nominal();
        }
        codec::to_bytes_ct(&FheUint8::from_raw_parts(out, id, tag, ReRandomizationMetadata::default()))
    }
}

#[pymethods]
impl ServerKey {
    /// From a serialized server key or compressed server key.
    #[new]
    fn new(py: Python<'_>, data: PyBackedBytes) -> PyResult<Self> {
        let key = py
            .detach(|| codec::server_key(&data))
            .map_err(|e| value_error(format!("not a tfhe-rs server key: {e}")))?;
        let conf = Conformance::of((&key).into(), (&key).into());
        Ok(Self { key, conf })
    }

    fn __repr__(&self) -> String {
        "<hepix_tfhe.ServerKey>".into()
    }

    /// `op` on every ciphertext of `cts` (serialized `FheUint8` or `CompressedFheUint8`), giving
    /// serialized `FheUint8`s.
    ///
    /// op: add-wrap (constant 0..=255), add-sat (-255..=255), ge-mask (threshold 0..=255:
    /// 255 where x >= t, else 0), min, max (0..=255), table (`table`: 256 bytes).
    /// circuit: nibble (default, the fastest exact one), table (the op's table through the
    /// generic table circuit), tfhe-rs (tfhe-rs's integer operations), tfhe-rs-min-add
    /// (saturating add as scalar_min/max then add), tfhe-rs-table (match_value).
    #[pyo3(signature = (op, cts, constant = 0, table = None, threads = 1, circuit = "nibble"))]
    #[allow(clippy::too_many_arguments)]
    fn apply(
        &self,
        py: Python<'_>,
        op: &str,
        cts: Vec<PyBackedBytes>,
        constant: i64,
        table: Option<PyBackedBytes>,
        threads: usize,
        circuit: &str,
    ) -> PyResult<Py<PyList>> {
        let op = Op::parse(op, constant, table.as_deref()).map_err(value_error)?;
        let pool = pool(threads)?;
        let how = self.evaluation(op, circuit).map_err(value_error)?;
        let out = py
            .detach(|| batch(&pool, cts.len(), "ciphertext", |i| self.eval_one(&how, &cts[i])))
            .map_err(value_error)?;
        bytes_list(py, out)
    }

    /// Serialized `FheUint8`s (or seeded ones) in one serialized `CompressedCiphertextList`.
    #[pyo3(signature = (cts, threads = 1))]
    fn compress(&self, py: Python<'_>, cts: Vec<PyBackedBytes>, threads: usize) -> PyResult<Py<PyBytes>> {
        let pool = pool(threads)?;
        let out = py
            .detach(|| {
                let cts = batch(&pool, cts.len(), "ciphertext", |i| self.conf.pixel(&cts[i], Some(&self.key)))?;
                self.compress_all(&pool, cts)
            })
            .map_err(value_error)?;
        Ok(PyBytes::new(py, &out).unbind())
    }

    /// The items of a serialized `CompressedCiphertextList`, as serialized `FheUint8`s.
    #[pyo3(signature = (data, threads = 1))]
    fn expand(&self, py: Python<'_>, data: PyBackedBytes, threads: usize) -> PyResult<Py<PyList>> {
        let pool = pool(threads)?;
        let out = py
            .detach(|| {
                let cts = self.expand_all(&pool, &data)?;
                batch(&pool, cts.len(), "list item", |i| codec::to_bytes_ct(&cts[i]))
            })
            .map_err(value_error)?;
        bytes_list(py, out)
    }

    /// The plaintext result of `op` on every input 0..=255 (the reference the circuits implement).
    #[staticmethod]
    #[pyo3(signature = (op, constant = 0, table = None))]
    fn reference(py: Python<'_>, op: &str, constant: i64, table: Option<PyBackedBytes>) -> PyResult<Py<PyBytes>> {
        let op = Op::parse(op, constant, table.as_deref()).map_err(value_error)?;
        Ok(PyBytes::new(py, &op.table()).unbind())
    }
}

/// The compact public key: encrypts pixels without the client key, cannot decrypt.
#[pyclass(module = "hepix_tfhe", frozen)]
struct PublicKey {
    key: CompactPublicKey,
}

#[pymethods]
impl PublicKey {
    /// From a serialized `CompactPublicKey` of `keygen`'s public-key encryption parameters.
    #[new]
    fn new(py: Python<'_>, data: PyBackedBytes) -> PyResult<Self> {
        let key = py
            .detach(|| codec::public_key(&data, &PKE))
            .map_err(|e| value_error(format!("not a tfhe-rs compact public key of hepix's parameters: {e}")))?;
        Ok(Self { key })
    }

    fn __repr__(&self) -> String {
        "<hepix_tfhe.PublicKey (compact)>".into()
    }

    /// One serialized packed `CompactCiphertextList` holding one `FheUint8` per byte of `data`.
    #[pyo3(signature = (data, threads = 1))]
    fn encrypt(&self, py: Python<'_>, data: PyBackedBytes, threads: usize) -> PyResult<Py<PyList>> {
        let pool = pool(threads)?;
        let out = py
            .detach(|| {
                batch(&pool, data.len(), "value", |i| {
                    let list = CompactCiphertextList::builder(&self.key).push(data[i]).build_packed();
                    codec::to_bytes_compact(&list)
                })
            })
            .map_err(value_error)?;
        bytes_list(py, out)
    }
}

#[pymodule]
fn hepix_tfhe(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(keygen, m)?)?;
    m.add_function(wrap_pyfunction!(check_pixels, m)?)?;
    m.add_class::<ClientKey>()?;
    m.add_class::<ServerKey>()?;
    m.add_class::<PublicKey>()?;
    m.add("BUILD_KEY", option_env!("HEPIX_BUILD_KEY").unwrap_or("unknown"))?;
    m.add("TFHE_RS_VERSION", "1.8.2")?;
    m.add("CIRCUITS", CIRCUITS)?;
    m.add("OPS", ops::NAMES)?;
    Ok(())
}
