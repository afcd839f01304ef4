"""Batches for the training loop and the evaluation pass, prepared ahead in a thread.

- `TrainBatches`: batch i is a pure function of (seed, i): int32 [B, T+1] windows drawn from a
  seeded per-epoch permutation of fixed-length windows, so the loader state a checkpoint holds
  is the integer index of the next batch.
- `EvalBatches`: the whole held-out split, every target token exactly once, with a mask.
Both prefetch to device, optionally sharded over a mesh's batch axis (multi-host: each host
puts only its own rows).
"""

import itertools
import math
import queue
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import NamedTuple

import numpy as np

from shared.data.bpe import PAD_ID
from shared.data.shards import Split
from shared.errors import BadInput

_M64 = np.uint64(0xFFFFFFFFFFFFFFFF)


def _mix64(x) -> np.ndarray:
    """splitmix64's finaliser: a fixed, numpy-version-independent hash of uint64 values."""
    x = np.asarray(x, dtype=np.uint64)
    with np.errstate(over="ignore"):
        x = x + np.uint64(0x9E3779B97F4A7C15)
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return x ^ (x >> np.uint64(31))


def _tokens_of(source: Split | np.ndarray) -> np.ndarray:
    return source.tokens if isinstance(source, Split) else np.asarray(source)


def bits_per_byte(mean_loss_nats: float, n_tokens: int, n_bytes: int) -> float:
    """Mean cross-entropy over n_tokens targets (nats) -> bits per UTF-8 byte of the text."""
    return mean_loss_nats * n_tokens / (n_bytes * math.log(2))


class TrainBatches:
    """Batches [B, T+1] int32 of the packed train stream; batch i is a pure function of (seed, i).

    Epoch e cuts the stream into W = N // T - 1 windows of T+1 tokens (neighbours share one
    token) starting at a seeded offset in [0, T), and visits them in a seeded order; batch i
    holds windows i*B .. i*B+B-1 of that endless sequence of epochs. The order comes from a
    fixed integer hash (splitmix64), so it does not change with the numpy version.
    A checkpoint stores the index of the next batch; `iterate(start=that)` resumes exactly.
    """

    def __init__(self, source: Split | np.ndarray, batch_size: int, seq_len: int, seed: int = 0):
        self.tokens = _tokens_of(source)
        if batch_size < 1 or seq_len < 1 or seed < 0:
            raise BadInput(
                f"batch {batch_size}, seq {seq_len}, seed {seed}: "
                "batch and seq must be >= 1, seed >= 0"
            )
        self.B, self.T, self.seed = batch_size, seq_len, seed
        self.windows_per_epoch = len(self.tokens) // seq_len - 1
        if self.windows_per_epoch < 1:
            raise BadInput(
                f"the split has {len(self.tokens):,} tokens, fewer than "
                f"2 * seq ({2 * seq_len}); use a shorter --seq"
            )
        self._perm_cache: dict[int, tuple[int, np.ndarray]] = {}
        self._lock = threading.Lock()  # the prefetch thread and the caller share the cache

    @property
    def tokens_per_epoch(self) -> int:
        return self.windows_per_epoch * self.T

    def _epoch(self, e: int) -> tuple[int, np.ndarray]:
        """(offset, window order) of epoch e; the last two epochs are cached."""
        with self._lock:
            if e not in self._perm_cache:
                base = _mix64(_mix64(self.seed) ^ np.uint64(e))
                offset = int(_mix64(base ^ _M64) % np.uint64(self.T))
                keys = _mix64(base ^ np.arange(self.windows_per_epoch, dtype=np.uint64))
                if len(self._perm_cache) >= 2:
                    self._perm_cache.pop(min(self._perm_cache))
                self._perm_cache[e] = (offset, np.argsort(keys, kind="stable"))
            return self._perm_cache[e]

    def starts(self, i: int) -> np.ndarray:
        """Token offsets of the B windows of batch i."""
        if i < 0:
            raise BadInput(f"batch index {i} must be >= 0")
        k = np.arange(i * self.B, (i + 1) * self.B, dtype=np.int64)  # windows since the start
        epoch, w = np.divmod(k, self.windows_per_epoch)
        out = np.empty(self.B, dtype=np.int64)
        for e in np.unique(epoch):
            offset, perm = self._epoch(int(e))
            out[epoch == e] = offset + perm[w[epoch == e]] * self.T
        return out

    def batch(self, i: int) -> np.ndarray:
        """Batch i as int32 [B, T+1]: inputs [:, :-1], targets [:, 1:]."""
        idx = self.starts(i)[:, None] + np.arange(self.T + 1)
        return self.tokens[idx].astype(np.int32)

    def iterate(
        self,
        start: int = 0,
        stop: int | None = None,
        *,
        sharding=None,
        prefetch: int = 2,
        device: bool = True,
    ) -> Iterator:
        """Batches start, start+1, ... (< stop), prepared `prefetch` ahead in a thread.

        device=True puts each on device (`jax.device_put`, with `sharding` if given, e.g. a
        NamedSharding over the mesh's batch axis); device=False yields numpy arrays.
        """
        indices = itertools.count(start) if stop is None else range(start, stop)
        put = _device_put(sharding) if device else (lambda x: x)
        return prefetch_ahead(lambda i: put(self.batch(i)), indices, prefetch)


class EvalBatch(NamedTuple):
    tokens: object  # int32 [B, T+1]
    mask: object  # bool [B, T]: which targets tokens[:, 1:] count


class EvalBatches:
    """The whole held-out stream in order: every target (tokens 1..N-1) exactly once.

    Window j holds tokens [j*T, j*T+T]; the last is padded with pad id and masked, and the last
    batch is filled with fully masked rows, so every batch is [B, T+1] (one compilation).
    `n_targets` is the mask total over all batches; for bits per byte use `bits_per_byte`.
    """

    def __init__(
        self, source: Split | np.ndarray, batch_size: int, seq_len: int, pad_id: int = PAD_ID
    ):
        self.tokens = _tokens_of(source)
        self.n_bytes = source.n_bytes if isinstance(source, Split) else None
        if batch_size < 1 or seq_len < 1 or len(self.tokens) < 2:
            raise BadInput(
                f"eval needs batch, seq >= 1 and >= 2 tokens (got batch "
                f"{batch_size}, seq {seq_len}, {len(self.tokens)} tokens)"
            )
        self.B, self.T, self.pad_id = batch_size, seq_len, pad_id
        self.n_targets = len(self.tokens) - 1
        self.n_windows = -(-self.n_targets // seq_len)

    def __len__(self) -> int:
        return -(-self.n_windows // self.B)

    def batch(self, i: int) -> EvalBatch:
        n, T = len(self.tokens), self.T
        tokens = np.full((self.B, T + 1), self.pad_id, dtype=np.int32)
        mask = np.zeros((self.B, T), dtype=bool)
        for r, j in enumerate(range(i * self.B, min((i + 1) * self.B, self.n_windows))):
            row = self.tokens[j * T : min(j * T + T + 1, n)]
            tokens[r, : len(row)] = row
            mask[r, : len(row) - 1] = True
        return EvalBatch(tokens, mask)

    def bits_per_byte(self, mean_loss_nats: float) -> float:
        if self.n_bytes is None:
            raise BadInput("bits per byte needs a Split (its byte count), not a bare array")
        return bits_per_byte(mean_loss_nats, self.n_targets, self.n_bytes)

    def iterate(self, *, sharding=None, prefetch: int = 2, device: bool = True) -> Iterator:
        put = _device_put(sharding) if device else (lambda x: x)
        return prefetch_ahead(
            lambda i: EvalBatch(*map(put, self.batch(i))), range(len(self)), prefetch
        )

    __iter__ = iterate


def _device_put(sharding) -> Callable[[np.ndarray], object]:
    """numpy global batch -> jax.Array, sharded if asked; multi-host: this host's rows only."""
    import jax

    def put(x: np.ndarray):
        if sharding is None:
            return jax.device_put(x)
        if jax.process_count() == 1:
            return jax.device_put(x, sharding)
        rows = [idx[0] for idx in sharding.addressable_devices_indices_map(x.shape).values()]
        lo = min(s.start or 0 for s in rows)
        hi = max(x.shape[0] if s.stop is None else s.stop for s in rows)
        return jax.make_array_from_process_local_data(sharding, x[lo:hi], x.shape)

    return put


def prefetch_ahead(make: Callable[[int], object], indices: Iterable[int], size: int) -> Iterator:
    """Yield make(i) for i in indices, computed up to `size` ahead in a daemon thread.

    An error in the thread is raised in the consumer, at the batch it happened on.
    """
    if size <= 0:
        yield from map(make, indices)
        return
    q: queue.Queue = queue.Queue(maxsize=size)
    stop = threading.Event()
    done = object()

    def offer(item) -> bool:
        while not stop.is_set():
            try:
                q.put(item, timeout=0.1)
                return True
            except queue.Full:
                pass
        return False

    def work():
        try:
            for i in indices:
                if not offer((make(i), None)):
                    return
            offer((done, None))
        except BaseException as err:  # handed to the consumer, raised there
            offer((None, err))

    thread = threading.Thread(target=work, daemon=True, name="data-prefetch")
    thread.start()
    try:
        while True:
            item, err = q.get()
            if err is not None:
                raise err
            if item is done:
                return
            yield item
    finally:
        # Wait for the worker (it sees `stop` within 0.1 s of its current batch): a daemon
        # thread left inside jax's C++ device_put when the interpreter exits is unwound by
        # CPython and aborts the process ("terminate called ... exception not rethrown"),
        # which happened after an evaluation that read only some of its batches.
        stop.set()
        thread.join()
