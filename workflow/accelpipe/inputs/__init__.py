"""Training-time input pipelines: what feeds prepared data to a model while it trains or is
evaluated, in the model's framework.

One module per pipeline: `slices` (2D nnU-Net batches) with `transforms` (its torch
augmentations), `volumes` (MONAI 3D crops), `imagefolder` (the ImageNet torch loader),
`coco_input` and `ade20k_input` (tf.data over the prepared TFRecords) with `shards` (a
worker's share of the shards, stateless keys) and `tf_data_checks` (the checks tf.data
pipelines run in the graph). They read what `accelpipe.datasets` prepared offline; the
datasets package never imports them.
"""
