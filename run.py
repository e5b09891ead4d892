"""Hydra entrypoint: compose the config, build the pipeline, run it.

python run.py                                  # default problem, offline mutator
python run.py problem.name=heilbronn max_mutants=300
python run.py -m seed=0,1 max_mutants=20       # a sweep, one checkpoint_dir per job
python run.py ... resume=true                  # continue the latest run of this command
"""

from __future__ import annotations

import sys

import hydra
from omegaconf import DictConfig

from gigaevo.pipeline.cli import USAGE_ERROR, prepare_argv, run_job


@hydra.main(version_base="1.3", config_path="config", config_name="config")
def main(cfg: DictConfig) -> None:
    run_job(cfg)


if __name__ == "__main__":
    try:
        sys.argv = prepare_argv(sys.argv)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(USAGE_ERROR)
    main()
