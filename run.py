"""Hydra entrypoint: compose the config, build the pipeline, run it.

python run.py                                  # default problem, offline mutator
python run.py problem.name=heilbronn max_mutants=300
python run.py -m seed=0,1 max_mutants=20       # a sweep, one checkpoint_dir per job
python run.py ... resume=true                  # continue the latest run of this command
"""

from __future__ import annotations

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
