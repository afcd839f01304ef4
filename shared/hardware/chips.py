"""The chips we size for: one table of every hardware number the project uses.

One table holds every hardware number the project uses, so a datasheet correction is a
one-line change. Each row says where its numbers come from: bf16 dense peak, HBM capacity and
bandwidth per chip, one-way ICI (or NVLink) bandwidth per link, and, for TPUs, the HBM per device
that libtpu's compiler lets a program use (measured deviceless, see `compiler_hbm_bytes`).
"""

from dataclasses import dataclass

GiB = 2**30
MiB = 2**20


@dataclass(frozen=True)
class Chip:
    """One accelerator chip. `None` means "not a fixed number" (CPU: measured at run time)."""

    name: str
    peak_bf16_flops: float | None  # dense bf16 FLOP/s
    hbm_bytes: int | None
    hbm_bandwidth: float | None  # bytes/s
    ici_link_bandwidth: float | None  # bytes/s, one direction, one link
    ici_axes: int  # torus dimensions (2 for v5e/v6e, 3 for v4/v5p/tpu7x); 1 for NVLink
    topology_prefix: str | None  # name libtpu uses in topology strings, TPUs only
    cores_per_chip_name: int = 1  # v4/v5p/tpu7x names count TensorCores: v5p-8 is 4 chips
    device_kinds: tuple[str, ...] = ()  # what jax reports as `device.device_kind`
    # jax devices per chip when libtpu compiles deviceless (plan mode): TPU7x shows each of its
    # two TensorCores as a device, and so does v4 there (a v4 TPU VM runs megacore: 1 per chip).
    devices_per_chip: int = 1
    compiler_hbm_bytes: int | None = None  # per device: the most HBM libtpu lets a program use
    source: str = ""  # where the numbers come from

    @property
    def hbm_bytes_per_device(self) -> int | None:
        return None if self.hbm_bytes is None else self.hbm_bytes // self.devices_per_chip

    @property
    def peak_flops_per_device(self) -> float | None:
        peak = self.peak_bf16_flops
        return None if peak is None else peak / self.devices_per_chip

    def roofline_terms(self, flops: float, bytes_accessed: float) -> tuple[float, float]:
        """The roofline's two terms for one device, seconds: its FLOPs at its bf16 peak and
        its bytes at its share of the chip's HBM bandwidth. Their max is a lower bound on the
        time, never a prediction: the one formula every verdict, phase and slice uses."""
        return (
            flops / self.peak_flops_per_device,
            bytes_accessed / (self.hbm_bandwidth / self.devices_per_chip),
        )

    @property
    def is_tpu(self) -> bool:
        return self.topology_prefix is not None

    @property
    def ici_bidirectional_bandwidth(self) -> float | None:
        """The scaling book's W_ici: both directions of one link."""
        return None if self.ici_link_bandwidth is None else 2 * self.ici_link_bandwidth


# Where the numbers come from. Cloud TPU pages give peak, HBM and HBM bandwidth per chip; the
# scaling book gives one-way ICI bandwidth per link; "compiler" numbers are libtpu's own refusal
# message ("... exceeds available HBM (15.75G)", G = GiB) for a too-large program, measured with
# libtpu 0.0.42.1, deviceless, on 2026-11-22 (tests/test_hardware.py re-measures them).
_BOOK_ICI = "ICI per link: https://jax-ml.github.io/scaling-book/tpus/ (TPU Specs)"
_COMPILER = "usable HBM: measured with libtpu 0.0.42.1, deviceless"


def _gib(value: float) -> int:
    return round(value * GiB)


CHIPS: dict[str, Chip] = {
    c.name: c
    for c in [
        Chip(
            "v4",
            275e12,
            32 * GiB,
            1.2e12,
            45e9,
            3,
            "v4",
            2,
            ("TPU v4",),
            devices_per_chip=2,
            compiler_hbm_bytes=_gib(15.25),
            source=f"https://cloud.google.com/tpu/docs/v4; {_BOOK_ICI}; {_COMPILER}",
        ),
        Chip(
            "v5e",
            197e12,
            16 * GiB,
            819e9,
            45e9,
            2,
            "v5e",
            1,
            ("TPU v5 lite", "TPU v5e"),
            compiler_hbm_bytes=_gib(15.75),
            source=f"https://cloud.google.com/tpu/docs/v5e; {_BOOK_ICI}; {_COMPILER}",
        ),
        # Google's table says 95 GiB, yet the compiler allows 95.74 GiB (the scaling book
        # lists 96 GB): the datasheet number stays, the verdict is the compiler's.
        Chip(
            "v5p",
            459e12,
            95 * GiB,
            2.76e12,
            90e9,
            3,
            "v5p",
            2,
            ("TPU v5", "TPU v5p"),
            compiler_hbm_bytes=_gib(95.74),
            source=f"https://cloud.google.com/tpu/docs/v5p; {_BOOK_ICI}; {_COMPILER}",
        ),
        Chip(
            "v6e",
            918e12,
            32 * GiB,
            1.64e12,
            90e9,
            2,
            "v6e",
            1,
            ("TPU v6 lite", "TPU v6e"),
            compiler_hbm_bytes=_gib(31.25),
            source=f"https://cloud.google.com/tpu/docs/v6e; {_BOOK_ICI}; {_COMPILER}",
        ),
        # Ironwood: 2307 TFLOP/s bf16, 192 GiB, 7380 GB/s and 1200 GB/s bidirectional ICI per
        # chip (Cloud TPU7x page, read 2026-11-22). The book has no TPU7x row, so the link
        # number is derived: 1200 GB/s over 6 links (3D torus) and 2 directions = 100 GB/s (the
        # same arithmetic gives 100 for v5p, where the book says 90). Names count TensorCores
        # (tpu7x-8 = 4 chips = 2x2x1), as in Google's accelerator types; jax sees 2 devices a chip.
        Chip(
            "tpu7x",
            2307e12,
            192 * GiB,
            7.38e12,
            100e9,
            3,
            "tpu7x",
            2,
            ("TPU7x",),
            devices_per_chip=2,
            compiler_hbm_bytes=_gib(94.75),
            source=f"https://docs.cloud.google.com/tpu/docs/tpu7x; {_COMPILER}",
        ),
        # GPU capacities are what the driver reports for the card (MiB), not the box's label;
        # peaks are dense bf16 (half the datasheets' with-sparsity figures), NVLink (or PCIe,
        # where a GPU has no NVLink) is one direction per GPU. What a deviceless compile needs
        # beyond these, and the bytes a jax process may use, are shared.hardware.gpus'.
        # A T4 (Turing) has no bf16 tensor cores: XLA runs a bf16 dot there as an f32 one on
        # the CUDA cores (8.1 TFLOP/s); fp16 would reach its tensor cores' 65. The peak a bf16
        # program gets is the f32 one, so that is the row's.
        Chip(
            "t4",
            8.1e12,
            15360 * MiB,
            320e9,
            16e9,
            1,
            None,
            1,
            ("Tesla T4",),
            source="https://www.nvidia.com/en-us/data-center/tesla-t4/ (FP32 8.1 TFLOPS, "
            "16 GB GDDR6 at 320 GB/s, PCIe Gen3 x16)",
        ),
        Chip(
            "l4",
            121e12,
            23034 * MiB,
            300e9,
            32e9,
            1,
            None,
            1,
            ("NVIDIA L4",),
            source="https://www.nvidia.com/en-us/data-center/l4/ (bf16 242 TFLOPS with "
            "sparsity, 24 GB at 300 GB/s, PCIe Gen4 x16)",
        ),
        Chip(
            "a100-40g",
            312e12,
            40960 * MiB,
            1.555e12,
            300e9,
            1,
            None,
            1,
            ("NVIDIA A100-SXM4-40GB", "NVIDIA A100-PCIE-40GB"),
            source="https://www.nvidia.com/en-us/data-center/a100/ (SXM 40GB: 1,555 GB/s, "
            "NVLink 600 GB/s both ways)",
        ),
        Chip(
            "a100-80g",
            312e12,
            81920 * MiB,
            2.039e12,
            300e9,
            1,
            None,
            1,
            ("NVIDIA A100-SXM4-80GB", "NVIDIA A100 80GB PCIe"),
            source="https://www.nvidia.com/en-us/data-center/a100/ (SXM 80GB: 2,039 GB/s, "
            "NVLink 600 GB/s both ways)",
        ),
        Chip(
            "h100",
            989e12,
            81559 * MiB,
            3.35e12,
            450e9,
            1,
            None,
            1,
            ("NVIDIA H100",),
            source="https://www.nvidia.com/en-us/data-center/h100/ (SXM)",
        ),
        Chip(
            "h200",
            989e12,
            143771 * MiB,
            4.8e12,
            450e9,
            1,
            None,
            1,
            ("NVIDIA H200",),
            source="https://www.nvidia.com/en-us/data-center/h200/",
        ),
        Chip(
            "b200",
            2.25e15,
            183359 * MiB,
            8.0e12,
            900e9,
            1,
            None,
            1,
            ("NVIDIA B200",),
            source="https://www.nvidia.com/en-us/data-center/hgx/ (HGX B200, per GPU)",
        ),
        Chip("cpu", None, None, None, None, 1, None, 1, ("cpu",), source="measured at run time"),
    ]
}


def chip_for_device_kind(device_kind: str) -> Chip | None:
    """Map jax's `device.device_kind` ('TPU v5 lite', 'NVIDIA H100 80GB HBM3') to a Chip."""
    # Longest match first: 'TPU v5 lite' must not be taken for 'TPU v5'.
    candidates = sorted(
        ((k, c) for c in CHIPS.values() for k in c.device_kinds), key=lambda kc: -len(kc[0])
    )
    for kind, chip in candidates:
        if device_kind.lower().startswith(kind.lower()):
            return chip
    return None


def current_chip() -> Chip | None:
    """The chip jax runs on now, or None for an accelerator not in the table."""
    import jax

    return chip_for_device_kind(jax.local_devices()[0].device_kind)
