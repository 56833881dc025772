"""Framework training and evaluation loops."""
