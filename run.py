"""Hydra entrypoint: compose the config, build the pipeline, run it.

python run.py                                  # default problem, offline mutator
python run.py problem.name=heilbronn max_mutants=300
python run.py -m seed=0,1 max_mutants=20       # a sweep, one checkpoint_dir per job
python run.py ... resume=true                  # continue the latest run of this command
"""

from __future__ import annotations

import os

# numpy advises the kernel to back every array of 4 MB or more with huge pages. Where the
# kernel's transparent huge pages are in "madvise" mode (most distributions), each such
# fresh array faults through page compaction: at a bank of 10,000 cards a decision that
# refits (its arrays span every card's block, fresh each time) took 54-58 ms of CPU instead
# of 46-47 at the median, and 150-315 ms instead of 51-52 at the 95th percentile
# (BENCHMARKS.md, "Decision latency"). numpy reads this at its import, which must come
# after; a value the user set is kept.
os.environ.setdefault("NUMPY_MADVISE_HUGEPAGE", "0")

from pathlib import Path

import hydra
from omegaconf import DictConfig

from gigaevo.pipeline.cli import main_entry, run_job

CONFIG_DIR = Path(__file__).resolve().parent / "config"


@hydra.main(version_base="1.3", config_path="config", config_name="config")
def main(cfg: DictConfig) -> None:
    run_job(cfg)


if __name__ == "__main__":
    main_entry(main, CONFIG_DIR)
