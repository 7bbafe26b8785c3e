//! Bytes in and out, through tfhe-rs's safe serialization: a versioned header naming the type,
//! a size limit on every deserialization (a hostile length prefix cannot make it allocate
//! without bound) and, for ciphertexts, a conformance check against the key's parameters (a
//! ciphertext of the wrong dimension or block count is refused before it reaches a bootstrap).
use tfhe::prelude::*;
use tfhe::safe_serialization::{safe_deserialize, safe_deserialize_conformant, safe_serialize};
use tfhe::conformance::ListSizeConstraint;
use tfhe::shortint::parameters::CompactPublicKeyEncryptionParameters;
use tfhe::{
    ClientKey, CompactCiphertextList, CompactCiphertextListConformanceParams, CompactPublicKey,
    CompressedCiphertextList, CompressedFheUint8, CompressedFheUint8ConformanceParams, CompressedServerKey,
    FheTypes, FheUint8, FheUint8ConformanceParams, ServerKey,
};

/// Largest serialized pixel ciphertext accepted (an `FheUint8` is about 66 KB).
pub const CT_LIMIT: u64 = 1 << 20;
/// Largest serialized key accepted (a server key with its compression keys is a few hundred MB).
pub const KEY_LIMIT: u64 = 4 << 30;
/// Largest serialized compact public key accepted (about 32 KB for the parameters in use).
pub const PUBLIC_KEY_LIMIT: u64 = 1 << 24;
/// Largest serialized compressed list accepted.
pub const LIST_LIMIT: u64 = 1 << 30;

pub fn to_bytes_ct(ct: &FheUint8) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    safe_serialize(ct, &mut out, CT_LIMIT).map_err(|e| e.to_string())?;
    Ok(out)
}

pub fn to_bytes_seeded(ct: &CompressedFheUint8) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    safe_serialize(ct, &mut out, CT_LIMIT).map_err(|e| e.to_string())?;
    Ok(out)
}

pub fn to_bytes_list(list: &CompressedCiphertextList) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    safe_serialize(list, &mut out, LIST_LIMIT).map_err(|e| e.to_string())?;
    Ok(out)
}

pub fn to_bytes_compact(list: &CompactCiphertextList) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    safe_serialize(list, &mut out, CT_LIMIT).map_err(|e| e.to_string())?;
    Ok(out)
}

pub fn public_key_bytes(key: &CompactPublicKey) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    safe_serialize(key, &mut out, PUBLIC_KEY_LIMIT).map_err(|e| e.to_string())?;
    Ok(out)
}

/// A compact public key of the public-key encryption parameters `params`.
pub fn public_key(bytes: &[u8], params: &CompactPublicKeyEncryptionParameters) -> Result<CompactPublicKey, String> {
    safe_deserialize_conformant::<CompactPublicKey>(bytes, PUBLIC_KEY_LIMIT, params)
}

/// The conformance of a public-key pixel ciphertext: a packed compact list of one element under
/// the public-key encryption parameters `params` (an unpacked list would skip the server's
/// sanitizing bootstrap, so it is refused).
pub fn compact_conformance(params: CompactPublicKeyEncryptionParameters) -> CompactCiphertextListConformanceParams {
    CompactCiphertextListConformanceParams::from_parameters_and_size_constraint(params, ListSizeConstraint::exact_size(1))
}

/// A public-key pixel ciphertext: a compact list conformant with `params` whose one element is
/// an 8-bit unsigned integer.
pub fn compact(bytes: &[u8], params: &CompactCiphertextListConformanceParams) -> Result<CompactCiphertextList, String> {
    let list = safe_deserialize_conformant::<CompactCiphertextList>(bytes, CT_LIMIT, params)?;
    match list.get_kind_of(0) {
        Some(FheTypes::Uint8) => Ok(list),
        other => Err(format!("the compact list holds {other:?}, not one FheUint8")),
    }
}

pub fn client_key_bytes(key: &ClientKey) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    safe_serialize(key, &mut out, KEY_LIMIT).map_err(|e| e.to_string())?;
    Ok(out)
}

pub fn server_key_bytes(key: &ServerKey) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    safe_serialize(key, &mut out, KEY_LIMIT).map_err(|e| e.to_string())?;
    Ok(out)
}

pub fn compressed_server_key_bytes(key: &CompressedServerKey) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    safe_serialize(key, &mut out, KEY_LIMIT).map_err(|e| e.to_string())?;
    Ok(out)
}

pub fn client_key(bytes: &[u8]) -> Result<ClientKey, String> {
    safe_deserialize::<ClientKey>(bytes, KEY_LIMIT)
}

/// A server key, or a compressed one (decompressed here).
pub fn server_key(bytes: &[u8]) -> Result<ServerKey, String> {
    match safe_deserialize::<ServerKey>(bytes, KEY_LIMIT) {
        Ok(k) => Ok(k),
        Err(full) => match safe_deserialize::<CompressedServerKey>(bytes, KEY_LIMIT) {
            Ok(k) => Ok(k.decompress()),
            Err(_) => Err(full),
        },
    }
}

/// A pixel ciphertext as loaded: ready to compute on, or a public-key encryption that the server
/// key must cast first.
pub enum Pixel {
    Ready(FheUint8),
    Compact(CompactCiphertextList),
}

/// The conformance parameters of every pixel ciphertext form.
pub struct Forms<'a> {
    pub full: &'a FheUint8ConformanceParams,
    pub seeded: &'a CompressedFheUint8ConformanceParams,
    pub compact: &'a CompactCiphertextListConformanceParams,
}

/// A pixel ciphertext: an `FheUint8`, a seeded `CompressedFheUint8` (expanded here) or a
/// public-key `CompactCiphertextList` of one `FheUint8`, each conformant with its parameters.
pub fn pixel(bytes: &[u8], forms: &Forms) -> Result<Pixel, String> {
    if bytes.is_empty() {
        return Err("empty byte string".into());
    }
    let as_full = match safe_deserialize_conformant::<FheUint8>(bytes, CT_LIMIT, forms.full) {
        Ok(ct) => return Ok(Pixel::Ready(ct)),
        Err(e) => e,
    };
    let as_seeded = match safe_deserialize_conformant::<CompressedFheUint8>(bytes, CT_LIMIT, forms.seeded) {
        Ok(ct) => return Ok(Pixel::Ready(ct.decompress())),
        Err(e) => e,
    };
    match compact(bytes, forms.compact) {
        Ok(list) => Ok(Pixel::Compact(list)),
        Err(as_compact) => Err(format!(
            "not an FheUint8 ({as_full}), a CompressedFheUint8 ({as_seeded}) nor a public-key CompactCiphertextList ({as_compact})"
        )),
    }
}

/// Whether `bytes` is a pixel ciphertext conformant with its parameters (as [`pixel`] loads it,
/// without expanding a seeded one): Err says why not.
pub fn check_pixel(bytes: &[u8], forms: &Forms) -> Result<(), String> {
    if bytes.is_empty() {
        return Err("empty byte string".into());
    }
    let as_full = match safe_deserialize_conformant::<FheUint8>(bytes, CT_LIMIT, forms.full) {
        Ok(_) => return Ok(()),
        Err(e) => e,
    };
    let as_seeded = match safe_deserialize_conformant::<CompressedFheUint8>(bytes, CT_LIMIT, forms.seeded) {
        Ok(_) => return Ok(()),
        Err(e) => e,
    };
    compact(bytes, forms.compact).map(|_| ()).map_err(|as_compact| {
        format!("not an FheUint8 ({as_full}), a CompressedFheUint8 ({as_seeded}) nor a public-key CompactCiphertextList ({as_compact})")
    })
}

pub fn list(bytes: &[u8]) -> Result<CompressedCiphertextList, String> {
    if bytes.is_empty() {
        return Err("empty byte string".into());
    }
    safe_deserialize::<CompressedCiphertextList>(bytes, LIST_LIMIT)
}

/// Decrypt one pixel.
pub fn decrypt(ct: &FheUint8, key: &ClientKey) -> u8 {
    ct.decrypt(key)
}
