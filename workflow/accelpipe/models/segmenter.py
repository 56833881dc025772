"""Segmenter (Strudel et al. 2021): ViT encoder + linear or mask-transformer decoder.

API (Keras 2 via `accelpipe.core.keras2`, TF 2.15 and 2.21):

- `build_segmenter(num_classes=150, image_size=512, encoder="B_16", decoder="mask",
  decoder_layers=2, dropout=0.0, drop_path=0.1, decoder_dropout=0.1) -> keras.Model`:
  input images [B, S, S, 3] float, already normalised to [-1, 1]; output float32 **logits**
  [B, S, S, num_classes] (no softmax: the loss takes logits), float32 under any
  mixed-precision policy (the global policy at build time sets the compute dtype).
- `no_decay_variables(model)`: variables Segmenter/timm exclude from weight decay.
- `DECODERS`: the decoder names ("linear", "mask"); another name is a ConfigError.

Which reference each part follows (REFERENCE-tensorflow B.1, `rstrudel/segmenter`):

| part                         | follows                                                       |
|------------------------------|---------------------------------------------------------------|
| encoder layers and names     | original ViT / vit-keras (`models/vit.py`), npz-loadable      |
| encoder dropout, drop_path   | `segm/model/vit.py`, `blocks.py` (linear drop_path schedule)  |
| drop CLS                     | `segm/model/segmenter.py` (`x[:, num_extra_tokens:]`)         |
| linear decoder `head`        | `decoder.py : DecoderLinear`                                  |
| mask decoder                 | `decoder.py : MaskTransformer` (classes appended after        |
|                              | patches, heads D/64, mlp 4D, LayerNorm eps 1e-5 = torch's)    |
| init                         | `segm/model/utils.py : init_weights` (trunc_normal 0.02,      |
|                              | LayerNorm 1/0), proj_patch/proj_classes D**-0.5 * randn       |
| logits upsampling            | `segmenter.py`: bilinear, half-pixel (= torch                 |
|                              | align_corners=False), of the logits, never of a softmax       |
| not followed                 | the hackathon's softmax-then-resize (pitfall 12) and its      |
|                              | default-initialised class embeddings (B.2)                    |

Layer names: the encoder's (see `vit.py`), then `drop_cls`; linear: `head`; mask: `proj_dec`,
`cls_emb`, `decoder_block_{i}`, `decoder_norm`, `patch_tokens_out`, `class_tokens_out`,
`proj_patch`, `proj_classes` (both L2-normalised), `masks`, `mask_norm`; then `mask_grid`
[B, S/p, S/p, C] and `logits` (float32 bilinear upsampling to [B, S, S, C]).
"""

from __future__ import annotations

from accelpipe.core.errors import ConfigError
from accelpipe.core.keras2 import keras, tf
from accelpipe.models.vit import (
    AddPositionEmbs,
    ClassToken,
    TransformerBlock,
    ViTConfig,
    dense,
    encoder_config,
    grid_size,
    layer_norm,
    trunc_normal,
    vit_encoder,
)

DECODER_EPS = 1e-5  # Segmenter's decoder uses torch nn.LayerNorm defaults
DECODERS = ("linear", "mask")


class ClassEmbedding(keras.layers.Layer):
    """Appends `cls_emb` [1, n_cls, D] after the patch tokens: [B, N, D] -> [B, N + n_cls, D]."""

    def __init__(self, num_classes: int, **kwargs) -> None:
        super().__init__(**kwargs)
        self.num_classes = num_classes

    def build(self, input_shape) -> None:
        shape = (1, self.num_classes, input_shape[-1])
        self.cls_emb = self.add_weight(name="cls_emb", shape=shape, initializer=trunc_normal())
        super().build(input_shape)

    def call(self, x):
        cls = tf.tile(tf.cast(self.cls_emb, x.dtype), [tf.shape(x)[0], 1, 1])
        return tf.concat([x, cls], axis=1)

    def get_config(self) -> dict:
        return {**super().get_config(), "num_classes": self.num_classes}


class ProjectL2(keras.layers.Layer):
    """x @ W (W [D, D] ~ D**-0.5 * randn, no bias), then L2-normalised along features."""

    def build(self, input_shape) -> None:
        d = int(input_shape[-1])
        init = keras.initializers.RandomNormal(stddev=d**-0.5)
        self.kernel = self.add_weight(name=self.name, shape=(d, d), initializer=init)
        super().build(input_shape)

    def call(self, x):
        y = tf.einsum("btd,de->bte", x, tf.cast(self.kernel, x.dtype))
        return tf.math.l2_normalize(y, axis=-1)


class Upsample(keras.layers.Layer):
    """Bilinear resize to `size` x `size` (half-pixel centres, as torch align_corners=False)."""

    def __init__(self, size: int, **kwargs) -> None:
        super().__init__(**kwargs)
        self.size = size

    def call(self, x):
        return tf.image.resize(x, [self.size, self.size], method="bilinear")

    def get_config(self) -> dict:
        return {**super().get_config(), "size": self.size}


def _linear_decoder(patches, num_classes: int, config: ViTConfig, layers: int, dropout: float):
    return dense(num_classes, "head")(patches)


def _mask_decoder(patches, num_classes: int, config: ViTConfig, layers: int, dropout: float):
    """Segmenter's MaskTransformer: [B, N, D] patch tokens -> [B, N, num_classes] masks."""
    d = config.hidden
    n_patches = patches.shape[1]
    x = dense(d, "proj_dec")(patches)
    x = ClassEmbedding(num_classes, name="cls_emb")(x)
    for i in range(layers):
        x = TransformerBlock(max(1, d // 64), 4 * d, dropout, 0.0, DECODER_EPS,
                             name=f"decoder_block_{i}")(x)  # fmt: skip
    x = layer_norm("decoder_norm", DECODER_EPS)(x)
    patch_out = keras.layers.Cropping1D((0, num_classes), name="patch_tokens_out")(x)
    class_out = keras.layers.Cropping1D((n_patches, 0), name="class_tokens_out")(x)
    patch_feat = ProjectL2(name="proj_patch")(patch_out)
    class_feat = ProjectL2(name="proj_classes")(class_out)
    masks = keras.layers.Dot(axes=2, name="masks")([patch_feat, class_feat])  # cosine sims
    return layer_norm("mask_norm", DECODER_EPS)(masks)  # over the class axis


_DECODERS = {"linear": _linear_decoder, "mask": _mask_decoder}
assert tuple(_DECODERS) == DECODERS


def _check(num_classes: int, decoder: str, decoder_layers: int) -> None:
    if decoder not in _DECODERS:
        raise ConfigError(
            f"unknown Segmenter decoder {decoder!r}; expected one of {', '.join(DECODERS)}"
        )
    if num_classes < 1:
        raise ConfigError(f"Segmenter needs at least one class, got num_classes={num_classes}")
    if decoder_layers < 0:
        raise ConfigError(f"decoder_layers must be >= 0, got {decoder_layers}")


def build_segmenter(
    num_classes: int = 150,
    image_size: int = 512,
    encoder: str = "B_16",
    decoder: str = "mask",
    decoder_layers: int = 2,
    dropout: float = 0.0,
    drop_path: float = 0.1,
    decoder_dropout: float = 0.1,
) -> keras.Model:
    """Segmenter: [B, S, S, 3] in [-1, 1] -> float32 logits [B, S, S, num_classes]."""
    config = encoder_config(encoder)
    _check(num_classes, decoder, decoder_layers)
    grid = grid_size(image_size, config.patch)
    images = keras.Input((image_size, image_size, 3), name="images")
    tokens = vit_encoder(images, config, image_size, dropout, drop_path)
    patches = keras.layers.Cropping1D((1, 0), name="drop_cls")(tokens)
    masks = _DECODERS[decoder](patches, num_classes, config, decoder_layers, decoder_dropout)
    masks = keras.layers.Reshape((grid, grid, num_classes), name="mask_grid")(masks)
    # float32 layer: the low-resolution logits are cast before upsampling, so the loss and
    # the full-size logits stay float32 under mixed_bfloat16 (pitfall 16).
    logits = Upsample(image_size, dtype="float32", name="logits")(masks)
    return keras.Model(images, logits, name=f"segmenter_{encoder}_{decoder}")


_NO_DECAY_LAYERS = (keras.layers.LayerNormalization, ClassToken, AddPositionEmbs, ClassEmbedding)


def no_decay_variables(model: keras.Model) -> list[tf.Variable]:
    """Trainable variables without weight decay: cls_emb, position embedding, class token,
    every LayerNorm scale/offset and every bias (Segmenter's `no_weight_decay` + timm's 1-D
    rule). In `model.trainable_variables` order."""
    skip: set[int] = set()
    for layer in model.submodules:
        if isinstance(layer, _NO_DECAY_LAYERS):
            skip.update(id(v) for v in layer.trainable_weights)
        elif isinstance(layer, (keras.layers.Dense, keras.layers.Conv2D)) and layer.use_bias:
            skip.add(id(layer.bias))
    return [v for v in model.trainable_variables if id(v) in skip]
