"""A PyTorch process that never loads TensorFlow through TensorBoard.

MONAI imports torch.utils.tensorboard, whose projector module asks TensorBoard for a TF API;
where TensorFlow is installed too (the main venv holds both frameworks) that imports all of
it: 5-15 s and several hundred MB per process, for nothing a PyTorch workload uses.
TensorBoard's own switch is a module named `tensorboard.compat.notf`: while it exists,
TensorBoard uses its TF stub. Import this module before MONAI; TensorFlow processes never do.
"""

from __future__ import annotations

import sys
import types

NO_TF = "tensorboard.compat.notf"

sys.modules.setdefault(NO_TF, types.ModuleType(NO_TF))
