"""numpy for semantic routing (the ``routing`` extra), and vectors as unit rows."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    Matrix = npt.NDArray[np.float32]


def numpy_module() -> Any:
    """numpy, or InvalidOptions saying how to install it."""
    try:
        import numpy
    except ImportError:  # pragma: no cover - the extra installs it
        from unillm.errors import InvalidOptions

        raise InvalidOptions("semantic routing needs numpy: pip install 'unillm-sdk[routing]'") from None
    return numpy


def unit_rows(vectors: Sequence[Sequence[float]] | Matrix) -> Matrix:
    """The vectors as a float32 matrix whose rows have length 1 (cosine = dot product)."""
    np = numpy_module()
    m = np.asarray(vectors, dtype=np.float32)
    if m.ndim != 2 or m.shape[0] == 0:
        raise ValueError("expected a non-empty list of equal-length vectors")
    norms = np.linalg.norm(m, axis=1, keepdims=True)
    return m / np.where(norms == 0, 1.0, norms)  # type: ignore[no-any-return]
