"""Launching one training job over several processes, devices or nodes.

`torch_launch`: torchrun (under srun in a Slurm allocation) and each process's place in the
process group; its Slurm rules also serve `tf_launch`: one worker per device with its
TF_CONFIG for tf.distribute's MultiWorkerMirroredStrategy (`python -m
accelpipe.launch.tf_launch` in each Slurm task).
"""
