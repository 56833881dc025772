"""Vision Transformer encoder as Keras 2 layers (original ViT / vit-keras structure and names).

API (Keras 2 via `accelpipe.core.keras2`, TF 2.15 and 2.21):

- `ENCODERS`: named configs (`ViTConfig(patch, hidden, layers, heads, mlp)`); `encoder_config(name)`
  raises ConfigError listing the known names.
- `grid_size(image_size, patch) -> int`: patches per side; ConfigError unless a multiple.
- `vit_encoder(images, config, image_size, dropout=0.0, drop_path=0.0)`: applies the encoder to a
  Keras tensor [B, S, S, 3] -> tokens [B, 1 + (S/p)^2, D], CLS first, after the final norm.
- `build_vit(image_size=224, encoder="B_16", dropout=0.0, drop_path=0.0) -> keras.Model`.
- `encoder_variables(model) -> dict`: `<layer>/<sublayer>/<weight>` -> variable of the encoder
  of a bare ViT or a Segmenter (e.g. `embedding/kernel`, `class_token/cls`,
  `Transformer_encoderblock_0/MultiHeadDotProductAttention_1/query/kernel`): the keys of the
  converted starting weights (`models.pretrained_npz`; `vit_npz.load_converted` loads them).

Layer names are the Flax / vit-keras ones with `/` -> `_` (Keras rejects `/`), which
`vit_npz` maps back: `embedding` (Conv2D, kernel = stride = patch, VALID), `class_token`
(weight `cls` [1, 1, D]), `Transformer_posembed_input` (weight `pos_embedding` [1, 1 + N, D]),
`Transformer_encoderblock_{i}` (sublayers `LayerNorm_0`, `MultiHeadDotProductAttention_1` with
Dense `query`/`key`/`value`/`out`, `LayerNorm_2`, `MlpBlock_3` with `Dense_0`, gelu, `Dense_1`),
`Transformer_encoder_norm`. Pre-norm residual blocks, LayerNorm eps 1e-6 (the original ViT's).
Dropout follows Segmenter's blocks (after the position embedding, on the attention weights,
after the attention projection, after gelu and after `Dense_1`); drop_path (stochastic depth,
per sample) rises linearly from 0 in the first block to `drop_path` in the last.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from accelpipe.core.errors import ConfigError
from accelpipe.core.keras2 import keras, tf

ENCODER_EPS = 1e-6


@dataclass(frozen=True)
class ViTConfig:
    patch: int
    hidden: int
    layers: int
    heads: int
    mlp: int


ENCODERS: dict[str, ViTConfig] = {
    "B_16": ViTConfig(16, 768, 12, 12, 3072),
    "B_32": ViTConfig(32, 768, 12, 12, 3072),
    "L_16": ViTConfig(16, 1024, 24, 16, 4096),
    "L_32": ViTConfig(32, 1024, 24, 16, 4096),
    "Ti_16": ViTConfig(16, 192, 12, 3, 768),
    "S_16": ViTConfig(16, 384, 12, 6, 1536),
    "tiny": ViTConfig(8, 64, 2, 2, 128),  # tests and CPU configs
}


def encoder_config(name: str) -> ViTConfig:
    if name not in ENCODERS:
        raise ConfigError(f"unknown ViT encoder {name!r}; expected one of {', '.join(ENCODERS)}")
    return ENCODERS[name]


def grid_size(image_size: int, patch: int) -> int:
    if image_size <= 0 or image_size % patch:
        raise ConfigError(
            f"image size {image_size} is not a positive multiple of the ViT patch size {patch}"
        )
    return image_size // patch


def trunc_normal() -> keras.initializers.Initializer:
    # Segmenter / timm init of linear layers, tokens and position embeddings.
    return keras.initializers.TruncatedNormal(stddev=0.02)


def dense(units: int, name: str) -> keras.layers.Dense:
    return keras.layers.Dense(units, kernel_initializer=trunc_normal(), name=name)


def layer_norm(name: str, epsilon: float = ENCODER_EPS) -> keras.layers.LayerNormalization:
    return keras.layers.LayerNormalization(epsilon=epsilon, name=name)


class ClassToken(keras.layers.Layer):
    """Prepends the learned CLS token: [B, N, D] -> [B, 1 + N, D]."""

    def build(self, input_shape) -> None:
        self.cls = self.add_weight(
            name="cls", shape=(1, 1, input_shape[-1]), initializer=trunc_normal()
        )
        super().build(input_shape)

    def call(self, x):
        cls = tf.tile(tf.cast(self.cls, x.dtype), [tf.shape(x)[0], 1, 1])
        return tf.concat([cls, x], axis=1)


class AddPositionEmbs(keras.layers.Layer):
    """Adds `pos_embedding` [1, 1 + h*w, D] (CLS first, then the grid row by row)."""

    def __init__(self, grid: tuple[int, int], **kwargs) -> None:
        super().__init__(**kwargs)
        self.grid = tuple(grid)

    def build(self, input_shape) -> None:
        tokens = 1 + self.grid[0] * self.grid[1]
        if input_shape[1] != tokens:
            raise ValueError(
                f"{self.name}: {input_shape[1]} tokens, grid {self.grid} needs {tokens}"
            )
        self.pos_embedding = self.add_weight(
            name="pos_embedding", shape=(1, tokens, input_shape[-1]), initializer=trunc_normal()
        )
        super().build(input_shape)

    def call(self, x):
        return x + tf.cast(self.pos_embedding, x.dtype)

    def get_config(self) -> dict:
        return {**super().get_config(), "grid": self.grid}


class DropPath(keras.layers.Layer):
    """Stochastic depth: in training, zeroes a residual branch per sample with prob. `rate`."""

    def __init__(self, rate: float, **kwargs) -> None:
        super().__init__(**kwargs)
        self.rate = float(rate)

    def call(self, x, training=None):
        if not training or self.rate == 0.0:
            return x
        keep = 1.0 - self.rate
        shape = tf.concat([tf.shape(x)[:1], tf.ones([tf.rank(x) - 1], tf.int32)], axis=0)
        mask = tf.floor(keep + tf.random.uniform(shape))  # 1 with probability `keep`
        return x * tf.cast(mask / keep, x.dtype)

    def get_config(self) -> dict:
        return {**super().get_config(), "rate": self.rate}


class MultiHeadSelfAttention(keras.layers.Layer):
    """Dense `query`/`key`/`value` (D -> D, split into heads), scaled dot product, `out`."""

    def __init__(self, heads: int, dropout: float = 0.0, **kwargs) -> None:
        super().__init__(**kwargs)
        self.heads, self.dropout = heads, float(dropout)

    def build(self, input_shape) -> None:
        hidden = int(input_shape[-1])
        if hidden % self.heads:
            raise ConfigError(
                f"{self.name}: hidden size {hidden} not divisible by {self.heads} heads"
            )
        self.head_dim = hidden // self.heads
        self.query, self.key, self.value, self.out = (
            dense(hidden, n) for n in ("query", "key", "value", "out")
        )
        self.attn_drop = keras.layers.Dropout(self.dropout)
        self.proj_drop = keras.layers.Dropout(self.dropout)
        super().build(input_shape)

    def _split(self, x):
        x = tf.reshape(x, [-1, x.shape[1], self.heads, self.head_dim])
        return tf.transpose(x, [0, 2, 1, 3])  # [B, heads, T, head_dim]

    def call(self, x, training=None):
        q, k, v = (self._split(layer(x)) for layer in (self.query, self.key, self.value))
        logits = tf.matmul(q, k, transpose_b=True) * tf.cast(self.head_dim**-0.5, x.dtype)
        # Softmax in float32: bf16 (8-bit mantissa) saturates over ~1000 tokens.
        weights = tf.cast(tf.nn.softmax(tf.cast(logits, tf.float32)), x.dtype)
        y = tf.matmul(self.attn_drop(weights, training=training), v)
        y = tf.reshape(tf.transpose(y, [0, 2, 1, 3]), [-1, x.shape[1], x.shape[-1]])
        return self.proj_drop(self.out(y), training=training)

    def get_config(self) -> dict:
        return {**super().get_config(), "heads": self.heads, "dropout": self.dropout}


class MlpBlock(keras.layers.Layer):
    """`Dense_0` (D -> mlp), exact gelu, dropout, `Dense_1` (mlp -> D), dropout."""

    def __init__(self, mlp: int, dropout: float = 0.0, **kwargs) -> None:
        super().__init__(**kwargs)
        self.mlp, self.dropout = mlp, float(dropout)

    def build(self, input_shape) -> None:
        self.dense_0 = dense(self.mlp, "Dense_0")
        self.dense_1 = dense(int(input_shape[-1]), "Dense_1")
        self.drop = keras.layers.Dropout(self.dropout)
        super().build(input_shape)

    def call(self, x, training=None):
        y = tf.nn.gelu(self.dense_0(x), approximate=False)  # torch nn.GELU / Flax: erf form
        return self.drop(self.dense_1(self.drop(y, training=training)), training=training)

    def get_config(self) -> dict:
        return {**super().get_config(), "mlp": self.mlp, "dropout": self.dropout}


class TransformerBlock(keras.layers.Layer):
    """Pre-norm block: x + drop_path(attn(LN(x))), then x + drop_path(mlp(LN(x)))."""

    def __init__(
        self,
        heads: int,
        mlp: int,
        dropout: float = 0.0,
        drop_path: float = 0.0,
        epsilon: float = ENCODER_EPS,
        **kwargs,
    ) -> None:
        super().__init__(**kwargs)
        self.heads, self.mlp, self.dropout = heads, mlp, float(dropout)
        self.drop_path, self.epsilon = float(drop_path), float(epsilon)
        self.norm_0 = layer_norm("LayerNorm_0", self.epsilon)
        self.attention = MultiHeadSelfAttention(
            heads, dropout, name="MultiHeadDotProductAttention_1"
        )
        self.norm_2 = layer_norm("LayerNorm_2", self.epsilon)
        self.mlp_block = MlpBlock(mlp, dropout, name="MlpBlock_3")
        self.drop = DropPath(drop_path, name="drop_path")

    def call(self, x, training=None):
        x = x + self.drop(self.attention(self.norm_0(x), training=training), training=training)
        y = self.mlp_block(self.norm_2(x), training=training)
        return x + self.drop(y, training=training)

    def get_config(self) -> dict:
        return {
            **super().get_config(),
            "heads": self.heads,
            "mlp": self.mlp,
            "dropout": self.dropout,
            "drop_path": self.drop_path,
            "epsilon": self.epsilon,
        }


def drop_path_rates(drop_path: float, layers: int) -> list[float]:
    """Per-block stochastic depth, linear from 0 to `drop_path` (timm / Segmenter)."""
    return [float(r) for r in np.linspace(0.0, drop_path, layers)]


def vit_encoder(
    images, config: ViTConfig, image_size: int, dropout: float = 0.0, drop_path: float = 0.0
):
    """[B, S, S, 3] -> tokens [B, 1 + (S/p)^2, D] (CLS first), after `Transformer_encoder_norm`."""
    grid = grid_size(image_size, config.patch)
    x = keras.layers.Conv2D(
        config.hidden,
        config.patch,
        config.patch,
        "valid",
        kernel_initializer="lecun_normal",
        name="embedding",
    )(images)
    x = keras.layers.Reshape((grid * grid, config.hidden), name="patch_tokens")(x)  # row-major
    x = ClassToken(name="class_token")(x)
    x = AddPositionEmbs((grid, grid), name="Transformer_posembed_input")(x)
    x = keras.layers.Dropout(dropout, name="embedding_dropout")(x)
    for i, rate in enumerate(drop_path_rates(drop_path, config.layers)):
        block = TransformerBlock(
            config.heads, config.mlp, dropout, rate, name=f"Transformer_encoderblock_{i}"
        )
        x = block(x)
    return layer_norm("Transformer_encoder_norm")(x)


def build_vit(
    image_size: int = 224, encoder: str = "B_16", dropout: float = 0.0, drop_path: float = 0.0
) -> keras.Model:
    """The bare encoder: [B, S, S, 3] in [-1, 1] -> tokens [B, 1 + N, D] (no classifier head)."""
    config = encoder_config(encoder)
    grid_size(image_size, config.patch)  # a ConfigError before Keras sees the size
    images = keras.Input((image_size, image_size, 3), name="images")
    tokens = vit_encoder(images, config, image_size, dropout, drop_path)
    return keras.Model(images, tokens, name=f"vit_{encoder}")


def encoder_blocks(model: keras.Model) -> list[TransformerBlock]:
    """The model's `Transformer_encoderblock_{i}` layers in order."""
    names = {layer.name for layer in model.layers}
    blocks, i = [], 0
    while f"Transformer_encoderblock_{i}" in names:
        blocks.append(model.get_layer(f"Transformer_encoderblock_{i}"))
        i += 1
    return blocks


POS_EMBEDDING = "Transformer_posembed_input/pos_embedding"


def _norm_variables(prefix: str, layer) -> dict[str, tf.Variable]:
    return {f"{prefix}/gamma": layer.gamma, f"{prefix}/beta": layer.beta}


def _dense_variables(prefix: str, layer) -> dict[str, tf.Variable]:
    return {f"{prefix}/kernel": layer.kernel, f"{prefix}/bias": layer.bias}


def _block_variables(block: TransformerBlock) -> dict[str, tf.Variable]:
    prefix, att, mlp = block.name, block.attention, block.mlp_block
    found = _norm_variables(f"{prefix}/{block.norm_0.name}", block.norm_0)
    for layer in (att.query, att.key, att.value, att.out):
        found |= _dense_variables(f"{prefix}/{att.name}/{layer.name}", layer)
    found |= _norm_variables(f"{prefix}/{block.norm_2.name}", block.norm_2)
    for layer in (mlp.dense_0, mlp.dense_1):
        found |= _dense_variables(f"{prefix}/{mlp.name}/{layer.name}", layer)
    return found


def encoder_variables(model: keras.Model) -> dict[str, tf.Variable]:
    """Every encoder variable by its name in the converted starting weights, in layer order."""
    embedding = model.get_layer("embedding")
    found = _dense_variables("embedding", embedding)
    found["class_token/cls"] = model.get_layer("class_token").cls
    found[POS_EMBEDDING] = model.get_layer("Transformer_posembed_input").pos_embedding
    for block in encoder_blocks(model):
        found |= _block_variables(block)
    norm = "Transformer_encoder_norm"
    return found | _norm_variables(norm, model.get_layer(norm))
