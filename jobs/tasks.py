"""What runs inside Spark's Python workers: Arrow batches in, Arrow batches out.

These functions are the glue between Spark's ``mapInArrow``/``applyInArrow``
and ``hecore``: they shape rows after ``schemas.tables`` and call hecore for
everything cryptographic.  Expensive worker state (the HE context, a
strategy's cache table and randomness pool) is built from broadcast bytes
once per Python worker and kept in a module-level cache keyed by the
broadcast's token -- not once per task.
"""
from __future__ import annotations

import hashlib
import os
import time
from dataclasses import dataclass, field
from typing import Callable, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from schemas.tables import CIPHERTEXTS, TILES

from .checksums import ct_checksum, ct_checksums

#: token -> state built from a broadcast, for the life of this Python worker.
_WORKER_CACHE: dict[str, object] = {}


def worker_state(token: str, broadcast, build: Callable[[object], object], rebuilds=None):
    """The state for ``token``, built from ``broadcast.value`` the first time this worker needs it."""
    state = _WORKER_CACHE.get(token)
    if state is None:
        state = build(broadcast.value)
        _WORKER_CACHE[token] = state
        if rebuilds is not None:
            rebuilds.add([(os.getpid(), token)])
    return state


def image_id_for(source: str) -> str:
    return hashlib.sha256(source.encode("utf-8")).hexdigest()[:16]


# --- failure injection (a test switch) ------------------------------------------------------

#: ``KIND:DIR`` -- make ONE task of the job fail: ``raise`` an exception before the task's first
#: output, or ``kill`` its Python worker with SIGKILL after the first output (a half-written
#: file).  ``DIR`` (shared by all workers, so local and local-cluster masters only) receives a
#: marker file that makes it happen once.  Set it through Spark (``spark.executorEnv.``) so it
#: reaches the Python workers; tests only.
FAULT_ENV = "HEPIX_TEST_FAULT"


def inject_fault(stage: str, *, before_output: bool) -> None:
    spec = os.environ.get(FAULT_ENV)
    if not spec:
        return
    kind, _, directory = spec.partition(":")
    if (kind == "raise") != before_output or kind not in ("raise", "kill"):
        return
    try:
        fd = os.open(os.path.join(directory, f"{stage}-{kind}.once"), os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return                      # already happened in this job
    os.write(fd, f"{os.getpid()}\n".encode())
    os.close(fd)
    if kind == "raise":
        raise RuntimeError(f"{FAULT_ENV}: injected failure in a {stage} task (once)")
    import signal
    os.kill(os.getpid(), signal.SIGKILL)


# --- decode: binaryFile rows -> tiles of raw pixels, or rejects ------------------------------

@dataclass(frozen=True)
class DecodeOptions:
    tile_h: int
    tile_w: int
    resize: int | None
    conversions: tuple[str, ...]
    max_pixels: int
    halo: int = 0


def decode_partition(batches: Iterator[pa.RecordBatch], opts: DecodeOptions) -> Iterator[pa.RecordBatch]:
    from hecore.errors import ImageError
    from hecore.images import ImagePolicy, LoadedImage, load_image, preprocess
    from hecore.tiling import tile_image

    policy = ImagePolicy(max_pixels=opts.max_pixels, conversions=frozenset(opts.conversions))
    for batch in batches:
        rows: list[dict] = []
        paths = batch.column("path").to_pylist()
        contents = batch.column("content")
        for i, source in enumerate(paths):
            content = contents[i].as_buffer()
            size = content.size if content is not None else 0
            try:
                img: LoadedImage = load_image(memoryview(content) if content is not None else b"",
                                              source=source, policy=policy)
                if opts.resize:
                    img = preprocess(img, opts.resize)
            except ImageError as e:
                rows.append({"source": source, "reject_stage": "decode", "reject_reason": e.reason,
                             "reject_detail": str(e), "bytes": size})
                continue
            digest = hashlib.sha256(content).hexdigest()
            grid, tiles = tile_image(img.pixels, opts.tile_h, opts.tile_w, opts.halo)
            common = {"image_id": image_id_for(source), "source": source, "content_sha256": digest,
                      "image_height": img.height, "image_width": img.width,
                      "image_channels": img.channels, "conversions": list(img.conversions),
                      "tile_h": grid.tile_h, "tile_w": grid.tile_w, "halo": opts.halo, "bytes": size}
            # One row per tile and channel: units of equal work, which Spark's round-robin
            # repartition then spreads evenly (a whole RGB tile is three times a grey one).
            for t in tiles:
                planes = t.pixels if t.pixels.ndim == 3 else t.pixels[:, :, None]
                for c in range(img.channels):
                    rows.append({**common, "tile_y": t.ty, "tile_x": t.tx, "y": t.y, "x": t.x, "h": t.h,
                                 "w": t.w, "channel": c,
                                 "pixels": np.ascontiguousarray(planes[:, :, c]).tobytes()})
        if rows:
            yield pa.RecordBatch.from_pylist(rows, schema=TILES)


# --- encrypt: tiles -> ciphertext rows -----------------------------------------------------

@dataclass(frozen=True)
class EncryptPayload:
    """What the driver broadcasts to the encrypt tasks: public material and the strategy cache.

    With symmetric encryption (the key owner's run, ``hepix encrypt --encryption symmetric``)
    also the secret key: never in a log line or an error message.
    """

    public: object              # hecore.context.PublicMaterial
    strategy: str
    strategy_state: bytes | None
    allow_leaky: bool
    secret_key: bytes | None = field(default=None, repr=False)
    compression: str = "none"


def build_encryptor(payload: EncryptPayload):
    from hecore.context import HEContext
    from hecore.kernels import warm_up
    from hecore.strategies import make_strategy, strategy_from_state

    warm_up()
    ctx = HEContext.from_public(payload.public)
    if payload.strategy_state is not None:
        strategy = strategy_from_state(ctx, payload.strategy_state, allow_leaky=payload.allow_leaky)
    else:
        strategy = make_strategy(payload.strategy, ctx, allow_leaky=payload.allow_leaky).prepare()
    return ctx, strategy


@dataclass(frozen=True)
class EncryptMeta:
    run_id: str
    layout: str
    preset: str
    key_fingerprint: str
    encryption: str = "public"          # public | symmetric (hecore.symmetric, packed layout only)


def build_symmetric_encryptor(payload: EncryptPayload):
    from hecore.symmetric import SymmetricEncryptor

    # The driver already proved that the secret key belongs to the public key.
    return SymmetricEncryptor(payload.public, payload.secret_key, compression=payload.compression,
                              check_key=False)


def _encrypt_symmetric_batch(rb: pa.RecordBatch, *, token: str, broadcast, meta: EncryptMeta, rebuilds=None
                             ) -> Iterator[pa.RecordBatch]:
    """Every tile channel of ``rb`` in one native call (seeded secret-key encryption), a row each."""
    from hecore.ciphertexts import SECURITY_IND_CPA, CiphertextBatch
    from hecore.symmetric import STRATEGY, encrypt_blocks

    enc = worker_state(token + "/symmetric", broadcast, build_symmetric_encryptor, rebuilds)
    params = enc.params
    tiles = rb.to_pylist()
    if not tiles:
        return
    r = tiles[0]["halo"]          # one run: one tile size and halo
    blocks = [np.frombuffer(t["pixels"], dtype=np.uint8).reshape(t["tile_h"] + 2 * r, t["tile_w"] + 2 * r)
              for t in tiles]
    t0 = time.perf_counter()
    cts = encrypt_blocks(enc, blocks, r, complex_packing=meta.layout == "packed-complex")
    per_ct = (time.perf_counter() - t0) / len(tiles)
    for tile, ct in zip(tiles, cts):
        yield ciphertext_rows(
            meta, tile, tile["channel"], CiphertextBatch.from_list([ct], STRATEGY, SECURITY_IND_CPA), STRATEGY,
            SECURITY_IND_CPA, params.scheme, level=params.data_primes, scale_bits=params.scale_bits, ops=[],
            post_scale=1.0, encrypt_seconds=np.full(1, per_ct), process_seconds=np.zeros(1))


def _const(value, n: int, type_: pa.DataType) -> pa.Array:
    return pa.repeat(pa.scalar(value, type=type_), n)


def ciphertext_rows(meta: EncryptMeta, tile: dict, channel: int, batch, strategy_name: str,
                    security: str, scheme: str, level: int, scale_bits: int, ops: list[str],
                    post_scale: float, encrypt_seconds: np.ndarray, process_seconds: np.ndarray,
                    run_id: str | None = None) -> pa.RecordBatch:
    """One record batch of ciphertext rows (schema ``CIPHERTEXTS``) for one tile and channel."""
    n = len(batch)
    f = CIPHERTEXTS
    cols = {
        "run_id": _const(run_id or meta.run_id, n, pa.string()),
        "image_id": _const(tile["image_id"], n, pa.string()),
        "source": _const(tile["source"], n, pa.string()),
        "content_sha256": _const(tile["content_sha256"], n, pa.string()),
        "layout": _const(meta.layout, n, pa.string()),
        "scheme": _const(scheme, n, pa.string()),
        "preset": _const(meta.preset, n, pa.string()),
        "strategy": _const(strategy_name, n, pa.string()),
        "security": _const(security, n, pa.string()),
        "key_fingerprint": _const(meta.key_fingerprint, n, pa.string()),
    }
    for name in ("image_height", "image_width", "image_channels", "tile_h", "tile_w", "halo", "tile_y", "tile_x",
                 "y", "x", "h", "w"):
        cols[name] = _const(int(tile[name]), n, pa.int32())
    cols["channel"] = _const(channel, n, pa.int32())
    cols["index"] = pa.array(np.arange(n, dtype=np.int32))
    cols["ops"] = pa.array([ops] * n, type=pa.list_(pa.string()))
    cols["post_scale"] = _const(float(post_scale), n, pa.float64())
    cols["level"] = _const(level, n, pa.int32())
    cols["scale_bits"] = _const(scale_bits, n, pa.int32())
    cols["encrypt_seconds"] = pa.array(encrypt_seconds, type=pa.float64())
    cols["process_seconds"] = pa.array(process_seconds, type=pa.float64())
    cols["ct"] = batch.to_arrow()
    if cols["ct"].type != pa.binary():
        cols["ct"] = cols["ct"].cast(pa.binary())
    cols["ct_xxh3"] = ct_checksums(cols["ct"])
    return pa.RecordBatch.from_arrays([cols[name] for name in f.names], schema=f)


def encrypt_partition(batches: Iterator[pa.RecordBatch], *, token: str, broadcast, meta: EncryptMeta,
                      rebuilds=None, tasks=None) -> Iterator[pa.RecordBatch]:
    """Encrypt every tile channel of the partition, one record batch each."""
    if tasks is not None:
        tasks.add([os.getpid()])
    inject_fault("encrypt", before_output=True)
    if meta.encryption == "symmetric":
        for rb in batches:
            yield from _encrypt_symmetric_batch(rb, token=token, broadcast=broadcast, meta=meta, rebuilds=rebuilds)
        return
    ctx, strategy = worker_state(token, broadcast, build_encryptor, rebuilds)
    from hecore.ciphertexts import CiphertextBatch
    from hecore.packed import encrypt_plane

    params = ctx.params
    packed = meta.layout != "pixel"
    complex_packing = meta.layout == "packed-complex"
    for rb in batches:
        for tile in rb.to_pylist():
            r = tile["halo"]
            plane = np.frombuffer(tile["pixels"], dtype=np.uint8).reshape(tile["tile_h"] + 2 * r,
                                                                          tile["tile_w"] + 2 * r)
            t = time.perf_counter()
            if packed:      # the whole (edge-padded) tile channel and its halo in one fresh ciphertext
                batch = CiphertextBatch.from_list([encrypt_plane(ctx, plane, r, complex_packing)],
                                                  strategy.name, strategy.security)
            else:           # the valid pixels, one ciphertext each
                batch = strategy.encrypt(plane[: tile["h"], : tile["w"]])
            per_ct = (time.perf_counter() - t) / max(1, len(batch))
            n = len(batch)
            yield ciphertext_rows(
                meta, tile, tile["channel"], batch, strategy.name, strategy.security, params.scheme,
                level=params.data_primes, scale_bits=params.scale_bits, ops=[], post_scale=1.0,
                encrypt_seconds=np.full(n, per_ct), process_seconds=np.zeros(n))
            inject_fault("encrypt", before_output=False)


def histogram_partition(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Pixel-value counts (0..255) over the valid region of every tile: the corpus scan."""
    counts = np.zeros(256, dtype=np.int64)
    for rb in batches:
        for tile in rb.to_pylist():
            plane = np.frombuffer(tile["pixels"], dtype=np.uint8).reshape(tile["tile_h"], tile["tile_w"])
            counts += np.bincount(plane[: tile["h"], : tile["w"]].reshape(-1), minlength=256)
    yield pa.RecordBatch.from_pydict({"value": np.arange(256, dtype=np.int32), "count": counts})


# --- shared by process and decrypt --------------------------------------------------------

def replace_columns(rb: pa.RecordBatch, **columns) -> pa.RecordBatch:
    arrays = [columns.get(name, rb.column(i)) for i, name in enumerate(rb.schema.names)]
    return pa.RecordBatch.from_arrays(arrays, schema=rb.schema)


def pixel_positions(rb) -> np.ndarray:
    """(py, px) of every pixel-layout ciphertext row: its tile's origin + its index, row-major."""
    index = rb.column("index").to_numpy()
    w = rb.column("w").to_numpy()
    py = rb.column("y").to_numpy() + index // w
    px = rb.column("x").to_numpy() + index % w
    return np.stack([py, px], axis=1)


def _single(rb, name: str):
    values = pc_unique(rb.column(name))
    if len(values) != 1:
        raise ValueError(f"a batch mixes {len(values)} values of {name}: {values[:4]}")
    return values[0]


def pc_unique(col) -> list:
    return pc.unique(col).to_pylist()


def build_layout(public):
    """A worker's view of the public context: the ciphertext layout the byte-level ops need."""
    from hecore.context import HEContext
    from hecore.kernels import warm_up

    warm_up()
    return HEContext.from_public(public).layout


# --- process: pointwise ops (brightness, watermark) ------------------------------------------

def pointwise_partition(batches: Iterator[pa.RecordBatch], *, token: str, broadcast, spec: str,
                        run_id: str, rebuilds=None, tasks=None) -> Iterator[pa.RecordBatch]:
    from hecore.ciphertexts import CiphertextBatch
    from hecore.ops import apply_pointwise, parse_op

    layout = worker_state(token, broadcast, build_layout, rebuilds)
    if tasks is not None:
        tasks.add([os.getpid()])
    op = parse_op(spec)
    for rb in batches:
        if rb.num_rows == 0:
            continue
        post_scale = float(_single(rb, "post_scale"))
        scale_bits = int(_single(rb, "scale_bits"))
        t = time.perf_counter()
        batch = CiphertextBatch.from_arrow(rb.column("ct"), "pipeline", "leaks")
        out = apply_pointwise(batch, layout, op, pixel_positions(rb), post_scale, scale_bits)
        dt = (time.perf_counter() - t) / rb.num_rows
        new_ct = out.to_arrow()
        yield replace_columns(
            rb, ct=new_ct, ct_xxh3=ct_checksums(new_ct), run_id=_const(run_id, rb.num_rows, pa.string()),
            ops=pa.array([o + [spec] for o in rb.column("ops").to_pylist()], type=pa.list_(pa.string())),
            post_scale=_const(post_scale * op.post_scale_factor, rb.num_rows, pa.float64()),
            process_seconds=pa.array(rb.column("process_seconds").to_numpy() + dt, type=pa.float64()))


# --- process: the packed layout (every op within one tile channel) ----------------------------

def build_evaluator(public):
    """A worker's evaluator: the public context with its relinearisation and rotation keys."""
    from hecore.context import HEContext
    from hecore.evaluator import Evaluator

    return Evaluator(HEContext.from_public(public))


def packed_geometry(r: dict):
    from hecore.packed_ops import PackedGeometry

    return PackedGeometry(r["tile_h"], r["tile_w"], r["halo"], r["y"], r["x"], r["image_height"], r["image_width"],
                          complex_packing=r["layout"] == "packed-complex")


def packed_partition(batches: Iterator[pa.RecordBatch], *, token: str, broadcast, specs: list[str],
                     run_id: str, rebuilds=None, tasks=None) -> Iterator[pa.RecordBatch]:
    """Apply the op chain to every packed ciphertext (one tile channel each), row by row."""
    from hecore.ops import parse_ops
    from hecore.packed_ops import apply_op

    ev = worker_state(token, broadcast, build_evaluator, rebuilds)
    if tasks is not None:
        tasks.add([os.getpid()])
    ops = parse_ops(specs)
    for rb in batches:
        if rb.num_rows == 0:
            continue
        cts, scales, secs = [], [], []
        rows = rb.to_pylist()
        for r in rows:
            t = time.perf_counter()
            c, ps = ev.load(r["ct"]), r["post_scale"]
            geom = packed_geometry(r)
            for op in ops:
                c, ps = apply_op(ev, c, op, geom, ps)
            cts.append(ev.dump(c))
            scales.append(ps)
            secs.append(r["process_seconds"] + time.perf_counter() - t)
        new_ct = pa.array(cts, type=pa.binary())
        yield replace_columns(
            rb, ct=new_ct, ct_xxh3=ct_checksums(new_ct), run_id=_const(run_id, rb.num_rows, pa.string()),
            ops=pa.array([r["ops"] + list(specs) for r in rows], type=pa.list_(pa.string())),
            post_scale=pa.array(scales, type=pa.float64()), process_seconds=pa.array(secs, type=pa.float64()))


# --- process: matching (distances to a query image) -------------------------------------------

def match_group(table: pa.Table, *, token: str, broadcast, metrics: list[str], query_id: str,
                query_source: str, bound: float, run_id: str, rebuilds=None) -> pa.Table:
    """All ciphertexts of one image joined with the query's (column ``query_ct``): one encrypted
    distance per metric."""
    from hecore.matching import distance_scale, pair_partial
    from schemas.tables import ENCRYPTED_DISTANCES

    ev = worker_state(token, broadcast, build_evaluator, rebuilds)
    if table.num_rows == 0:
        return ENCRYPTED_DISTANCES.empty_table()
    rows = table.to_pylist()
    first = rows[0]
    packed = first["layout"] != "pixel"
    t = time.perf_counter()
    loaded = [(ev.load(r["ct"]), ev.load(r["query_ct"]), packed_geometry(r) if packed else None) for r in rows]
    load_seconds = time.perf_counter() - t
    out = []
    for metric in metrics:
        t = time.perf_counter() - load_seconds / len(metrics)
        partials = [pair_partial(ev, a, b, metric, geom, bound, len(rows)) for a, b, geom in loaded]
        total = ev.add_many(partials)
        out.append({
            "run_id": run_id, "query_image_id": query_id, "query_source": query_source,
            "image_id": first["image_id"], "source": first["source"], "metric": metric,
            "layout": first["layout"], "scheme": first["scheme"], "preset": first["preset"],
            "key_fingerprint": first["key_fingerprint"], "ops": first["ops"], "bound": bound,
            "parts": len(rows),
            "distance_scale": distance_scale(metric, first["post_scale"], bound, len(rows), ev.params.is_integer),
            "process_seconds": time.perf_counter() - t, "ct": ev.dump(total)})
    return pa.Table.from_pylist(out, schema=ENCRYPTED_DISTANCES)


# --- process: the mean filter (tile + halo) --------------------------------------------------

HALO_COLUMNS = [("target_ty", pa.int32()), ("target_tx", pa.int32())]


def scatter_partition(batches: Iterator[pa.RecordBatch], *, halo: int) -> Iterator[pa.RecordBatch]:
    """Send each pixel ciphertext to its own tile and to the neighbour tiles whose halo needs it."""
    from hecore.ops import halo_tiles

    for rb in batches:
        if rb.num_rows == 0:
            continue
        pos = pixel_positions(rb)
        th, tw = rb.column("tile_h").to_numpy(), rb.column("tile_w").to_numpy()
        hh, ww = rb.column("image_height").to_numpy(), rb.column("image_width").to_numpy()
        take, tys, txs = [], [], []
        for i in range(rb.num_rows):
            rows, cols = -(-int(hh[i]) // int(th[i])), -(-int(ww[i]) // int(tw[i]))
            for ty, tx in halo_tiles(int(pos[i, 0]), int(pos[i, 1]), int(th[i]), int(tw[i]), rows, cols, halo):
                take.append(i)
                tys.append(ty)
                txs.append(tx)
        out = rb.take(pa.array(take, type=pa.int64()))
        arrays = out.columns + [pa.array(tys, type=pa.int32()), pa.array(txs, type=pa.int32())]
        schema = out.schema
        for name, type_ in HALO_COLUMNS:
            schema = schema.append(pa.field(name, type_, nullable=False))
        yield pa.RecordBatch.from_arrays(arrays, schema=schema)


def mean_filter_group(table: pa.Table, *, token: str, broadcast, k: int, spec: str, run_id: str,
                      rebuilds=None) -> pa.Table:
    """One output tile of the k x k mean filter from the tile's ciphertexts and its halo."""
    from hecore.ciphertexts import SECURITY_LEAKS, CiphertextBatch
    from hecore.ops import mean_filter_tile

    layout = worker_state(token, broadcast, build_layout, rebuilds)
    rb = table.combine_chunks().to_batches()[0] if table.num_rows else None
    if rb is None:
        return pa.Table.from_batches([], schema=CIPHERTEXTS)
    first = rb.slice(0, 1).to_pylist()[0]
    ty, tx = first["target_ty"], first["target_tx"]
    th, tw = first["tile_h"], first["tile_w"]
    height, width = first["image_height"], first["image_width"]
    out_y, out_x = ty * th, tx * tw
    out_h, out_w = min(th, height - out_y), min(tw, width - out_x)
    pos = pixel_positions(rb)
    cts = CiphertextBatch.from_arrow(rb.column("ct"), "pipeline", "leaks")
    tile_cts = {(int(py), int(px)): cts[i] for i, (py, px) in enumerate(pos)}
    securities = set(pc_unique(rb.column("security")))
    strategies = pc_unique(rb.column("strategy"))
    security = SECURITY_LEAKS if SECURITY_LEAKS in securities else securities.pop()
    t = time.perf_counter()
    batch = mean_filter_tile(layout, tile_cts, height, width, k, out_y, out_x, out_h, out_w,
                             strategy=strategies[0], security=security)
    dt = (time.perf_counter() - t) / max(1, len(batch))
    # The output pixel (y, x) keeps the encryption time and history of the input at (y, x).
    own = {(int(py), int(px)): i for i, (py, px) in enumerate(pos)}
    order = [own[(out_y + j // out_w, out_x + j % out_w)] for j in range(out_h * out_w)]
    src = rb.take(pa.array(order, type=pa.int64()))
    tile = {**first, "tile_y": ty, "tile_x": tx, "y": out_y, "x": out_x, "h": out_h, "w": out_w}
    meta = EncryptMeta(run_id=run_id, layout=first["layout"], preset=first["preset"],
                       key_fingerprint=first["key_fingerprint"])
    out = ciphertext_rows(
        meta, tile, first["channel"], batch, strategies[0], security, first["scheme"],
        level=first["level"], scale_bits=first["scale_bits"], ops=list(first["ops"]) + [spec],
        post_scale=first["post_scale"] / (k * k),
        encrypt_seconds=src.column("encrypt_seconds").to_numpy(),
        process_seconds=src.column("process_seconds").to_numpy() + dt)
    return pa.Table.from_batches([out])


# --- decrypt -------------------------------------------------------------------------------

@dataclass(frozen=True)
class SecretPayload:
    """Public material and the secret key, for the data owner's decrypt job only."""

    public: object
    secret_key: bytes = field(repr=False)   # never in a log line or an error message


DECRYPTED = pa.schema([
    ("image_id", pa.string()), ("source", pa.string()), ("content_sha256", pa.string()),
    ("image_height", pa.int32()), ("image_width", pa.int32()), ("image_channels", pa.int32()),
    ("layout", pa.string()), ("strategy", pa.string()), ("security", pa.string()), ("preset", pa.string()),
    ("ops", pa.list_(pa.string())), ("channel", pa.int32()), ("py", pa.int32()), ("px", pa.int32()),
    ("raw", pa.float64()), ("cts", pa.int64()), ("ct_bytes", pa.int64()), ("encrypt_seconds", pa.float64()),
    ("process_seconds", pa.float64()), ("decrypt_seconds", pa.float64()),
])
# One row per decrypted pixel value.  A packed ciphertext yields many rows; its count (cts), bytes and
# seconds go on the first of them and 0 on the rest, so that per-image sums stay right.


def build_decryptor(payload: SecretPayload):
    from hecore.context import HEContext
    return HEContext.from_public(payload.public, secret_key=payload.secret_key)


def decrypt_partition(batches: Iterator[pa.RecordBatch], *, token: str, broadcast,
                      rebuilds=None, tasks=None, flood_std: float = 0.0) -> Iterator[pa.RecordBatch]:
    """Decrypt rows; ``flood_std`` > 0 adds noise flooding (hecore.flooding) of that standard
    deviation, in pixel units, to every decrypted value."""
    ctx = worker_state(token, broadcast, build_decryptor, rebuilds)
    if tasks is not None:
        tasks.add([os.getpid()])
    for rb in batches:
        if rb.num_rows == 0:
            continue
        if set(pc_unique(rb.column("layout"))) == {"pixel"}:
            yield _decrypt_pixel_rows(ctx, rb, flood_std)
        else:
            for i in range(rb.num_rows):
                yield _decrypt_packed_row(ctx, rb.slice(i, 1), flood_std)


def _decrypt_pixel_rows(ctx, rb: pa.RecordBatch, flood_std: float = 0.0) -> pa.RecordBatch:
    from hecore.ciphertexts import CiphertextBatch
    from hecore.flooding import flooding_noise

    t = time.perf_counter()
    raw = ctx.decrypt_pixels(CiphertextBatch.from_arrow(rb.column("ct"), "pipeline", "leaks"))
    if flood_std:      # raw x post_scale is the pixel value: scale the noise into raw units
        raw = raw + flooding_noise(len(raw), flood_std) / np.abs(rb.column("post_scale").to_numpy())
    dt = (time.perf_counter() - t) / rb.num_rows
    pos = pixel_positions(rb)
    cols = {name: rb.column(name) for name in DECRYPTED.names if name in rb.schema.names}
    cols.update(py=pa.array(pos[:, 0], type=pa.int32()), px=pa.array(pos[:, 1], type=pa.int32()),
                raw=pa.array(raw), cts=_const(1, rb.num_rows, pa.int64()),
                ct_bytes=pc.binary_length(rb.column("ct")).cast(pa.int64()),
                decrypt_seconds=_const(dt, rb.num_rows, pa.float64()))
    return pa.RecordBatch.from_arrays([cols[n] for n in DECRYPTED.names], schema=DECRYPTED)


def _decrypt_packed_row(ctx, row: pa.RecordBatch, flood_std: float = 0.0) -> pa.RecordBatch:
    """One packed ciphertext -> one row per valid pixel of its tile channel."""
    r = row.to_pylist()[0]
    from hecore.packed import decrypt_block

    th, tw, h, w = r["tile_h"], r["tile_w"], r["h"], r["w"]
    if r["layout"] not in ("packed", "packed-complex"):
        raise ValueError(f"{r['source']}: unknown layout {r['layout']!r}")
    t = time.perf_counter()
    slots = decrypt_block(ctx, r["ct"], th, tw, r["halo"], r["layout"] == "packed-complex")[:h, :w]
    if flood_std:
        from hecore.flooding import flood
        slots = flood(slots, flood_std / abs(r["post_scale"]))
    dt = time.perf_counter() - t
    n = h * w
    yy, xx = np.divmod(np.arange(n), w)
    first = np.zeros(n)
    first[0] = 1.0
    cols = {name: _const(r[name], n, DECRYPTED.field(name).type) for name in
            ("image_id", "source", "content_sha256", "image_height", "image_width", "image_channels",
             "layout", "strategy", "security", "preset", "channel")}
    cols.update(ops=pa.array([r["ops"]] * n, type=pa.list_(pa.string())),
                py=pa.array(r["y"] + yy, type=pa.int32()), px=pa.array(r["x"] + xx, type=pa.int32()),
                raw=pa.array(slots.reshape(-1)), cts=pa.array(first.astype(np.int64)),
                ct_bytes=pa.array((first * len(r["ct"])).astype(np.int64)),
                encrypt_seconds=pa.array(first * r["encrypt_seconds"]),
                process_seconds=pa.array(first * r["process_seconds"]), decrypt_seconds=pa.array(first * dt))
    return pa.RecordBatch.from_arrays([cols[n] for n in DECRYPTED.names], schema=DECRYPTED)


IMAGES = pa.schema([
    ("image_id", pa.string()), ("source", pa.string()), ("content_sha256", pa.string()),
    ("height", pa.int32()), ("width", pa.int32()), ("channels", pa.int32()),
    ("layout", pa.string()), ("strategy", pa.string()), ("security", pa.string()), ("preset", pa.string()),
    ("ops", pa.list_(pa.string())), ("values", pa.binary()),      # float64 H x W x C true values
    ("unsnapped", pa.binary()),     # float64 raw x post_scale, before snapping to the exact grid
    ("ciphertexts", pa.int64()), ("ciphertext_bytes", pa.int64()), ("encrypt_seconds", pa.float64()),
    ("process_seconds", pa.float64()), ("decrypt_seconds", pa.float64()),
])


def assemble_group(table: pa.Table) -> pa.Table:
    """All decrypted values of one image -> one row with the image's true values (float64)."""
    from hecore.ops import finish_for, parse_ops

    first = table.slice(0, 1).to_pylist()[0]
    h, w, c = first["image_height"], first["image_width"], first["image_channels"]
    raw = np.full((h, w, c), np.nan)
    raw[table.column("py").to_numpy(), table.column("px").to_numpy(),
        table.column("channel").to_numpy()] = table.column("raw").to_numpy()
    if np.isnan(raw).any():
        missing = int(np.isnan(raw).sum())
        raise ValueError(f"{first['source']}: {missing} of {raw.size} pixel values have no ciphertext")
    finish = finish_for(parse_ops(first["ops"]))
    values = finish.apply(raw)
    unsnapped = raw * finish.post_scale_float
    row = {k: first[k] for k in ("image_id", "source", "content_sha256", "layout", "strategy", "security",
                                 "preset", "ops")}
    row.update(height=h, width=w, channels=c, values=values.astype(np.float64).tobytes(),
               unsnapped=unsnapped.astype(np.float64).tobytes(),
               ciphertexts=int(np.sum(table.column("cts").to_numpy())),
               ciphertext_bytes=int(np.sum(table.column("ct_bytes").to_numpy())),
               encrypt_seconds=float(np.sum(table.column("encrypt_seconds").to_numpy())),
               process_seconds=float(np.sum(table.column("process_seconds").to_numpy())),
               decrypt_seconds=float(np.sum(table.column("decrypt_seconds").to_numpy())))
    return pa.Table.from_pylist([row], schema=IMAGES)


ORIGINALS = pa.schema([("content_sha256", pa.string()), ("original", pa.binary()),
                       ("orig_height", pa.int32()), ("orig_width", pa.int32()), ("orig_channels", pa.int32())])


def originals_partition(batches: Iterator[pa.RecordBatch], opts: DecodeOptions) -> Iterator[pa.RecordBatch]:
    """Reference images, preprocessed exactly as ``encrypt`` did, keyed by the file's sha256."""
    from hecore.errors import ImageError
    from hecore.images import ImagePolicy, load_image, preprocess

    policy = ImagePolicy(max_pixels=opts.max_pixels, conversions=frozenset(opts.conversions))
    for batch in batches:
        rows = []
        contents = batch.column("content")
        for i, source in enumerate(batch.column("path").to_pylist()):
            content = contents[i].as_buffer()
            if content is None:
                continue
            try:
                img = load_image(memoryview(content), source=source, policy=policy)
                if opts.resize:
                    img = preprocess(img, opts.resize)
            except ImageError:
                continue        # not one of the encrypted images; encrypt already reported it
            rows.append({"content_sha256": hashlib.sha256(content).hexdigest(),
                         "original": np.ascontiguousarray(img.pixels).tobytes(),
                         "orig_height": img.height, "orig_width": img.width, "orig_channels": img.channels})
        if rows:
            yield pa.RecordBatch.from_pylist(rows, schema=ORIGINALS)


def metrics_partition(batches: Iterator[pa.RecordBatch], *, run_id: str, png_dir: str | None = None
                      ) -> Iterator[pa.RecordBatch]:
    """Quality of each decrypted image against its (plaintext-processed) original."""
    from hecore.images import array_to_image_bytes
    from hecore.ops import parse_ops, reference
    from hecore.quality import compare, round_to_uint8
    from schemas.tables import METRICS

    for rb in batches:
        rows = []
        for r in rb.to_pylist():
            shape = (r["height"], r["width"], r["channels"])
            values = np.frombuffer(r["values"], dtype=np.float64).reshape(shape)
            unsnapped = np.frombuffer(r["unsnapped"], dtype=np.float64).reshape(shape)
            if r["channels"] == 1:
                values, unsnapped = values[:, :, 0], unsnapped[:, :, 0]
            ops = parse_ops(r["ops"])
            base = {"run_id": run_id, "image_id": r["image_id"], "source": r["source"],
                    "content_sha256": r["content_sha256"], "channel": -1, "ops": "|".join(r["ops"]),
                    "layout": r["layout"], "strategy": r["strategy"], "security": r["security"],
                    "preset": r["preset"], "width": r["width"], "height": r["height"],
                    "channels": r["channels"], "ciphertexts": r["ciphertexts"],
                    "ciphertext_bytes": r["ciphertext_bytes"], "encrypt_seconds": r["encrypt_seconds"],
                    "process_seconds": r["process_seconds"], "decrypt_seconds": r["decrypt_seconds"]}
            if r.get("original") is not None:
                orig = np.frombuffer(r["original"], dtype=np.uint8).reshape(
                    (r["orig_height"], r["orig_width"], r["orig_channels"]))
                if r["orig_channels"] == 1:
                    orig = orig[:, :, 0]
                expected = reference(orig, ops)
                q = compare(round_to_uint8(expected), values)
                base.update(reference="plaintext-processed" if ops else "original", mse=q.mse,
                            psnr=q.psnr, ssim=q.ssim, exact_fraction=q.exact_fraction,
                            max_abs_err=float(np.max(np.abs(unsnapped - expected))))
            else:
                base.update(reference="none")
            rows.append(base)
            if png_dir:
                name = f"{r['image_id']}-{r['source'].rsplit('/', 1)[-1].rsplit('.', 1)[0]}.png"
                with open(os.path.join(png_dir, name), "wb") as f:
                    f.write(array_to_image_bytes(round_to_uint8(values), "PNG"))
        if rows:
            yield pa.RecordBatch.from_pylist(rows, schema=METRICS)


# --- encrypt, writing Parquet from the Python workers --------------------------------------------

WRITTEN = pa.schema([("file", pa.string()), ("rows", pa.int64()), ("bytes", pa.int64())])


def encrypt_to_files(batches: Iterator[pa.RecordBatch], *, directory: str, token: str, broadcast,
                     meta: EncryptMeta, rebuilds=None, tasks=None) -> Iterator[pa.RecordBatch]:
    """Encrypt a partition and write its ciphertext rows as one Parquet file in ``directory``.

    Used when the workers see the output directory as a local path (local and
    local-cluster masters): the ciphertext bytes then never pass through the
    JVM, which otherwise spends most of a core moving them (Arrow, row
    conversion, its Parquet writer).  Only ``(file, rows, bytes)`` goes back
    to Spark; the driver keeps exactly the files successful tasks reported.
    The file is written under a temporary name and renamed when complete.
    """
    import uuid

    import pyarrow.parquet as pq
    from pyspark import TaskContext

    tc = TaskContext.get()
    name = f"part-{tc.partitionId():05d}-{tc.attemptNumber()}-{uuid.uuid4().hex[:8]}.parquet"
    tmp = os.path.join(directory, f".{name}.tmp")
    rows, writer = 0, None
    try:
        for rb in encrypt_partition(batches, token=token, broadcast=broadcast, meta=meta,
                                    rebuilds=rebuilds, tasks=tasks):
            if writer is None:
                writer = pq.ParquetWriter(tmp, CIPHERTEXTS, compression="none", use_dictionary=False,
                                          write_statistics=False, data_page_size=8 * 2**20)
            writer.write_batch(rb)
            rows += rb.num_rows
    finally:
        if writer is not None:
            writer.close()
    if writer is None:
        yield pa.RecordBatch.from_pylist([{"file": None, "rows": 0, "bytes": 0}], schema=WRITTEN)
        return
    os.replace(tmp, os.path.join(directory, name))
    yield pa.RecordBatch.from_pylist(
        [{"file": name, "rows": rows, "bytes": os.path.getsize(os.path.join(directory, name))}], schema=WRITTEN)
