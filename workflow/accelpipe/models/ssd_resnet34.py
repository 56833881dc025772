"""SSD300 with the ResNet-34 backbone (MLPerf / Habana SSD-ResNet34, REFERENCE-tensorflow A.2).

API (Keras 2 via `accelpipe.core.keras2`, TF 2.15 and 2.21):

- `build_ssd300(num_classes=81, width=64) -> keras.Model`: input [B, 300, 300, 3] float32
  NHWC, outputs `[cls_logits [B, 8732, num_classes], box_deltas [B, 8732, 4]]`, both float32
  under any mixed-precision policy (the global policy at build time sets the compute
  dtype). `width` is the stem's channels (64 = the reference); every backbone and extra
  layer scales with it, the anchors and feature-map sizes do not (tiny configs train a
  narrow model on CPU).
- `trainable_variables(model)`: the variables to update; the stem conv + BN and the first
  block's first conv + BN are frozen as in the reference (excluded from the update only: their
  BN moving statistics still update in training mode, like the reference).
- `l2_variables(model)`: every trainable variable that is not a BatchNormalization variable
  (biases included), for the coupled L2 term (`ssd_loss.l2_loss`).
- `build_backbone(width=64) -> keras.Model`: the backbone alone ([B,300,300,3] -> layer
  `backbone_out`), with the SSD's layer names (what the weights stage converts into).
- `backbone_variables(model) -> dict`: `<layer>/<weight>` -> variable of every backbone layer
  (e.g. `stem_conv/kernel`, `g1b1_bn1/moving_mean`), in the reference's creation order: the keys
  of the converted starting weights (`models.pretrained_npz`).
- `load_pretrained(model, folder) -> dict`: assigns the weights stage's converted backbone
  (`<folder>/weights.npz`); DataError naming the first missing key or wrong shape.
- `checkpoint_width(path) -> int`: the stem's channels in a TF checkpoint of either format below.
- `save_backbone(model, path)` / `load_backbone(model, path)`: backbone weights.
  `load_backbone` reads either our format, a `tf.train.Checkpoint` whose attributes are the
  backbone layer names (what `save_backbone` writes), or the reference's TF1 ResNet-34
  checkpoint (`model.ckpt-28152`: `conv2d[_N]/kernel`, `batch_normalization[_N]/{gamma, beta,
  moving_mean, moving_variance}`, with or without a `resnet34/` prefix), whose `tf.layers`
  auto-numbering follows creation order, which `_backbone` reproduces (per block: projection
  conv + BN, conv1 + BN, conv2 + BN).

Layer names: `stem_conv`, `stem_bn`, `g{group}b{block}_{conv1,bn1,conv2,bn2,proj,proj_bn}`,
`extra{k}_{1x1,3x3}`, `head{level}_{cls,box}`; the backbone output is layer `backbone_out`
and the six feature maps are `feature{level}` (38, 19, 10, 5, 3, 1).
"""

from __future__ import annotations

from pathlib import Path

from accelpipe.core.errors import DataError
from accelpipe.core.keras2 import keras, tf
from accelpipe.models import pretrained_npz
from accelpipe.models.ssd_boxes import FEATURE_SIZES, IMAGE_SIZE, NUM_DEFAULTS

BN_MOMENTUM = 0.9
BN_EPSILON = 1e-5
# (channels, blocks, first stride): ResNet-34's first three groups, group 3 at stride 1.
GROUPS = ((64, 3, 1), (128, 4, 2), (256, 6, 1))
# (1x1 channels, 3x3 channels, 3x3 stride, 3x3 padding) of the extra blocks 7..11.
EXTRAS: tuple[tuple[int, int, int, str], ...] = ((256, 512, 2, "same"), (256, 512, 2, "same"))
EXTRAS += ((128, 256, 2, "same"), (128, 256, 1, "valid"), (128, 256, 1, "valid"))
FROZEN_LAYERS = ("stem_conv", "stem_bn", "g1b1_conv1", "g1b1_bn1")


def _he():
    # The reference backbone's variance_scaling default (fan_in, truncated normal); it is
    # normally replaced by the pretrained checkpoint anyway.
    return keras.initializers.VarianceScaling(1.0, "fan_in", "truncated_normal")


def _conv(x, filters: int, kernel: int, stride: int, name: str):
    """Backbone conv, no bias. Stride > 1: symmetric fixed padding + VALID (Keras "same" pads
    asymmetrically, which would shift every feature against the reference checkpoint)."""
    if stride > 1:
        total = kernel - 1
        pad = (total // 2, total - total // 2)
        x = keras.layers.ZeroPadding2D((pad, pad), name=f"{name}_pad")(x)
    padding = "valid" if stride > 1 else "same"
    return keras.layers.Conv2D(
        filters, kernel, stride, padding, use_bias=False, kernel_initializer=_he(), name=name
    )(x)


def _bn(x, name: str, zero_gamma: bool = False):
    return keras.layers.BatchNormalization(
        momentum=BN_MOMENTUM,
        epsilon=BN_EPSILON,
        gamma_initializer="zeros" if zero_gamma else "ones",
        name=name,
    )(x)


def _block(x, filters: int, stride: int, projection: bool, name: str):
    """ResNet v1 basic block; the last BN starts at gamma 0 so the block starts as identity."""
    shortcut = x
    if projection:
        shortcut = _bn(_conv(x, filters, 1, stride, f"{name}_proj"), f"{name}_proj_bn")
    y = _conv(x, filters, 3, stride, f"{name}_conv1")
    y = keras.layers.ReLU(name=f"{name}_relu1")(_bn(y, f"{name}_bn1"))
    y = _bn(_conv(y, filters, 3, 1, f"{name}_conv2"), f"{name}_bn2", zero_gamma=True)
    y = keras.layers.Add(name=f"{name}_add")([y, shortcut])
    return keras.layers.ReLU(name=f"{name}_out")(y)


def _scaled(channels: int, width: int) -> int:
    return max(1, channels * width // 64)


def _backbone(images, width: int):
    """ResNet-34 up to group 3 -> [B, 38, 38, 256 x width / 64]."""
    x = _conv(images, width, 7, 2, "stem_conv")
    x = keras.layers.ReLU(name="stem_relu")(_bn(x, "stem_bn"))
    x = keras.layers.MaxPool2D(3, 2, "same", name="stem_pool")(x)
    channels = width
    for g, (full, blocks, stride) in enumerate(GROUPS, start=1):
        filters = _scaled(full, width)
        for b in range(1, blocks + 1):
            first = b == 1
            projection = first and (stride > 1 or filters != channels)
            x = _block(x, filters, stride if first else 1, projection, f"g{g}b{b}")
            channels = filters
    return keras.layers.Activation("linear", name="backbone_out")(x)


def _extras(x, width: int) -> list:
    """The five extra blocks (conv with bias + ReLU, no BN) -> feature maps 19, 10, 5, 3, 1."""
    features = []
    for k, (mid_full, out_full, stride, padding) in enumerate(EXTRAS, start=7):
        mid, out = _scaled(mid_full, width), _scaled(out_full, width)
        x = keras.layers.Conv2D(mid, 1, activation="relu", name=f"extra{k}_1x1")(x)
        x = keras.layers.Conv2D(out, 3, stride, padding, activation="relu", name=f"extra{k}_3x3")(x)
        features.append(x)
    return features


def _head(feature, level: int, channels: int, kind: str):
    """3x3 conv head, reshaped NHWC -> [B, H*W*A, channels] (row, column, box order)."""
    size, anchors = FEATURE_SIZES[level], NUM_DEFAULTS[level]
    y = keras.layers.Conv2D(anchors * channels, 3, padding="same", name=f"head{level}_{kind}")(
        feature
    )
    return keras.layers.Reshape((size * size * anchors, channels), name=f"flat{level}_{kind}")(y)


def build_ssd300(num_classes: int = 81, width: int = 64) -> keras.Model:
    """SSD300-ResNet34: [B,300,300,3] -> [cls_logits [B,8732,C], box_deltas [B,8732,4]]."""
    images = keras.Input((IMAGE_SIZE, IMAGE_SIZE, 3), name="images")
    backbone = _backbone(images, width)
    maps = [backbone, *_extras(backbone, width)]
    features = [
        keras.layers.Activation("linear", name=f"feature{i}")(m) for i, m in enumerate(maps)
    ]
    cls = [_head(f, i, num_classes, "cls") for i, f in enumerate(features)]
    box = [_head(f, i, 4, "box") for i, f in enumerate(features)]
    # float32 outputs: under mixed_bfloat16 the loss and the softmax stay in float32.
    cls_out = keras.layers.Concatenate(axis=1, name="cls_concat")(cls)
    box_out = keras.layers.Concatenate(axis=1, name="box_concat")(box)
    cls_out = keras.layers.Activation("linear", dtype="float32", name="cls_logits")(cls_out)
    box_out = keras.layers.Activation("linear", dtype="float32", name="box_deltas")(box_out)
    return keras.Model(images, [cls_out, box_out], name="ssd300_resnet34")


def build_backbone(width: int = 64) -> keras.Model:
    """The ResNet-34 backbone alone, its layers named as in `build_ssd300`."""
    images = keras.Input((IMAGE_SIZE, IMAGE_SIZE, 3), name="images")
    return keras.Model(images, _backbone(images, width), name="resnet34_backbone")


def _frozen_ids(model: keras.Model) -> set[int]:
    return {id(v) for name in FROZEN_LAYERS for v in model.get_layer(name).weights}


def trainable_variables(model: keras.Model) -> list[tf.Variable]:
    """The model's trainable variables minus the frozen stem and first conv (+ their BNs)."""
    frozen = _frozen_ids(model)
    return [v for v in model.trainable_variables if id(v) not in frozen]


def l2_variables(model: keras.Model) -> list[tf.Variable]:
    """Trainable variables outside BatchNormalization layers (kernels and biases).

    Frozen variables are included, as in the reference (its L2 sums over all trainable
    variables); they get no update, so for training this only adds a constant to the loss.
    """
    bn = {
        id(v)
        for layer in model.layers
        if isinstance(layer, keras.layers.BatchNormalization)
        for v in layer.weights
    }
    return [v for v in model.trainable_variables if id(v) not in bn]


def backbone_layers(model: keras.Model) -> list:
    """The backbone's Conv2D and BatchNormalization layers in the reference's creation order
    (stem conv, BN; per block: projection conv, BN if any, conv1, bn1, conv2, bn2).

    Not `model.layers`, which is sorted by graph depth and puts a projection after conv1.
    """
    names = {layer.name for layer in model.layers}
    order = ["stem_conv", "stem_bn"]
    for g, (_, blocks, _) in enumerate(GROUPS, start=1):
        for b in range(1, blocks + 1):
            for part in ("proj", "proj_bn", "conv1", "bn1", "conv2", "bn2"):
                order.append(f"g{g}b{b}_{part}")
    return [model.get_layer(name) for name in order if name in names]


def _leaf(variable: tf.Variable) -> str:
    """`kernel`, `gamma`, `moving_mean`, ... of a layer's variable."""
    return variable.name.split("/")[-1].split(":")[0]


def backbone_variables(model: keras.Model) -> dict[str, tf.Variable]:
    """`<layer>/<weight>` -> variable of every backbone layer, in creation order."""
    return {
        f"{layer.name}/{_leaf(v)}": v for layer in backbone_layers(model) for v in layer.weights
    }


def load_pretrained(model: keras.Model, folder: Path) -> dict:
    """Assign the backbone from the weights stage's converted npz; facts for stage.json."""
    path = Path(folder) / pretrained_npz.WEIGHTS_FILE
    return pretrained_npz.assign(backbone_variables(model), path)


def checkpoint_width(path: Path) -> int:
    """The stem conv's output channels in a checkpoint `load_backbone` reads (64: ResNet-34)."""
    prefix = _prefix(path)
    for name, shape in tf.train.list_variables(prefix):
        stem = name.endswith("conv2d/kernel") and name.count("/") <= 2  # TF1: [resnet34/]conv2d
        if (stem or "stem_conv/kernel" in name) and len(shape) == 4:
            return int(shape[-1])
    raise DataError(f"{path}: no stem convolution (conv2d/kernel or stem_conv) in the checkpoint")


def _prefix(path: Path) -> str:
    """The checkpoint prefix of `path` (a prefix, or a folder with a `checkpoint` file or
    one `*.index`); DataError naming `path` when there is none."""
    path = Path(path)
    prefix = str(path)
    if path.is_dir():
        indexes = sorted(path.glob("*.index"))
        latest = tf.train.latest_checkpoint(str(path))
        prefix = latest or (str(indexes[0])[: -len(".index")] if len(indexes) == 1 else "")
    if not prefix or not tf.io.gfile.exists(f"{prefix}.index"):
        raise DataError(f"{path}: no TensorFlow checkpoint (expected <prefix>.index)")
    return prefix


def save_backbone(model: keras.Model, path: Path) -> str:
    """Write the backbone weights as a tf.train.Checkpoint keyed by layer name; returns the
    checkpoint prefix to pass to `load_backbone`."""
    ckpt = tf.train.Checkpoint(**{layer.name: layer for layer in backbone_layers(model)})
    return ckpt.write(str(path))


def load_backbone(model: keras.Model, path: Path) -> None:
    """Restore the backbone from `save_backbone`'s format or the reference TF1 checkpoint.

    `path` is a checkpoint prefix, or a directory holding a `checkpoint` file or one
    `<prefix>.index` (the reference's downloads carry no `checkpoint` file). Raises
    DataError naming the path when it is missing or does not fit the backbone.
    """
    prefix = _prefix(path)
    names = {name for name, _ in tf.train.list_variables(prefix)}
    layers = backbone_layers(model)
    if "_CHECKPOINTABLE_OBJECT_GRAPH" in names and not _tf1_names(names):
        ckpt = tf.train.Checkpoint(**{layer.name: layer for layer in layers})
        try:
            ckpt.read(prefix).assert_existing_objects_matched()
        except (AssertionError, ValueError) as exc:
            raise DataError(f"{path}: does not fit the SSD ResNet-34 backbone: {exc}") from None
        return
    _load_tf1(layers, prefix, path)


def _tf1_names(names: set[str]) -> bool:
    return any(n.endswith("conv2d/kernel") for n in names)


def _tf1_variable_names(layers: list) -> list[tuple[tf.Variable, str]]:
    """(variable, TF1 name) pairs: the i-th conv is `conv2d_i`, the i-th BN
    `batch_normalization_i` (index omitted for the first), as `tf.layers` numbers them."""
    pairs, counts = [], {"conv2d": 0, "batch_normalization": 0}
    for layer in layers:
        kind = "conv2d" if isinstance(layer, keras.layers.Conv2D) else "batch_normalization"
        scope = kind if counts[kind] == 0 else f"{kind}_{counts[kind]}"
        counts[kind] += 1
        pairs += [(v, f"{scope}/{_leaf(v)}") for v in layer.weights]
    return pairs


def _load_tf1(layers: list, prefix: str, path: Path) -> None:
    reader = tf.train.load_checkpoint(prefix)
    shapes = reader.get_variable_to_shape_map()
    scope = "resnet34/" if any(n.startswith("resnet34/") for n in shapes) else ""
    for variable, name in _tf1_variable_names(layers):
        key = scope + name
        if key not in shapes:
            raise DataError(f"{path}: no variable {key} for the ResNet-34 backbone")
        value = reader.get_tensor(key)
        if tuple(value.shape) != tuple(variable.shape):
            raise DataError(
                f"{path}: {key} has shape {tuple(value.shape)}, "
                f"the backbone needs {tuple(variable.shape)}"
            )
        variable.assign(value)
