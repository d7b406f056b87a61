"""The old name of `tests/mutate.py run_nsys.sh`, kept for whoever runs it by hand."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mutate  # noqa: E402

if __name__ == "__main__":
    sys.exit(mutate.main(["run_nsys.sh"] + sys.argv[1:]))
