"""The versions of the stack a result was computed with: every verdict, ledger row and
benchmark file states them, and a plan verdict's cache key includes them."""

from importlib import metadata

VERSIONED = ("jax", "jaxlib", "libtpu", "google-tunix", "qwix", "flax")


def package_version(package: str) -> str | None:
    """An installed package's version, None where it is not installed."""
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def versions() -> dict[str, str | None]:
    """The versions a verdict was compiled with (stated in every verdict, part of its cache key)."""
    return {package: package_version(package) for package in VERSIONED}
