//! Bytes in and out, through tfhe-rs's safe serialization: a versioned header naming the type,
//! a size limit on every deserialization (a hostile length prefix cannot make it allocate
//! without bound) and, for ciphertexts, a conformance check against the key's parameters (a
//! ciphertext of the wrong dimension or block count is refused before it reaches a bootstrap).
use tfhe::prelude::*;
use tfhe::safe_serialization::{safe_deserialize, safe_deserialize_conformant, safe_serialize};
use tfhe::{
    ClientKey, CompressedCiphertextList, CompressedFheUint8, CompressedFheUint8ConformanceParams,
    CompressedServerKey, FheUint8, FheUint8ConformanceParams, ServerKey,
};

/// Largest serialized pixel ciphertext accepted (an `FheUint8` is about 66 KB).
pub const CT_LIMIT: u64 = 1 << 20;
/// Largest serialized key accepted (a server key with its compression keys is a few hundred MB).
pub const KEY_LIMIT: u64 = 4 << 30;
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

/// A pixel ciphertext: an `FheUint8` or a seeded `CompressedFheUint8` (expanded here), either
/// conformant with `params`.
pub fn pixel(
    bytes: &[u8],
    full: &FheUint8ConformanceParams,
    seeded: &CompressedFheUint8ConformanceParams,
) -> Result<FheUint8, String> {
    if bytes.is_empty() {
        return Err("empty byte string".into());
    }
    match safe_deserialize_conformant::<FheUint8>(bytes, CT_LIMIT, full) {
        Ok(ct) => Ok(ct),
        Err(as_full) => {
            match safe_deserialize_conformant::<CompressedFheUint8>(bytes, CT_LIMIT, seeded) {
                Ok(ct) => Ok(ct.decompress()),
                Err(as_seeded) => Err(format!("not an FheUint8 ({as_full}) nor a CompressedFheUint8 ({as_seeded})")),
            }
        }
    }
}

/// Whether `bytes` is a pixel ciphertext conformant with `params` (as [`pixel`] loads it, without
/// expanding a seeded one): Err says why not.
pub fn check_pixel(
    bytes: &[u8],
    full: &FheUint8ConformanceParams,
    seeded: &CompressedFheUint8ConformanceParams,
) -> Result<(), String> {
    if bytes.is_empty() {
        return Err("empty byte string".into());
    }
    match safe_deserialize_conformant::<FheUint8>(bytes, CT_LIMIT, full) {
        Ok(_) => Ok(()),
        Err(as_full) => match safe_deserialize_conformant::<CompressedFheUint8>(bytes, CT_LIMIT, seeded) {
            Ok(_) => Ok(()),
            Err(as_seeded) => Err(format!("not an FheUint8 ({as_full}) nor a CompressedFheUint8 ({as_seeded})")),
        },
    }
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
