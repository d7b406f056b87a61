"""The judged run: the child that runs the script as written, the captures, the verdict and its outputs."""
