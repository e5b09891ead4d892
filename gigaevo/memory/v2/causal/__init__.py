"""Causal statistics of the card memory (memory=v2): pure, I/O-free.

Modules and the sections of docs/memory-model.md they implement:

- ``features``: memory-model.md "Rows and eligibility" (gains, feasible intervals,
  measurement sd), "Context features" and the design rows and prior blocks of "Immediate head".
- ``quadrature``: the residual-scale integration of memory-model.md "Immediate head"
  (adaptive Gauss-Legendre on tau = ln sigma).
- ``arrowhead``, ``spectral``: the computation of memory-model.md "Immediate head"
  (block-arrowhead design, Schur-complement solve, one pencil for all sigma nodes).
- ``blr``: memory-model.md "Immediate head" (conditional posterior, sigma mixture, health,
  draws) on a dense design (reference) or a ``BlockDesign`` (Schur path).
- ``invalidity``, ``chance``: memory-model.md "Invalidity head and chance constraint"
  (logistic MAP + Laplace, P_acc; ``chance`` integrates many cards at once).
- ``policy``, ``selection``: memory-model.md "Policy" (world values, probability matching,
  challenger exploration, RNG streams, proposal and offer draws, logged values);
  ``cardrows``: a decision's candidate cards and their treated rows.
- ``ope``: memory-model.md "Off-policy evaluation".
- ``lineage``: memory-model.md "Delayed-lineage head" (maturity, scan, g^L, exclusive credit).
- ``transfer``: memory-model.md "Multitask transfer".

- ``retirement``: memory-model.md "Retirement" (practical threshold, eligibility, per-card
  judgement); ``viability``: its Monte Carlo part (the heads' worlds of a card, the count of
  worlds safe and useful, the Wilson bound); ``projection``: the exact bivariate law of a
  card's two arm predictors under a fitted head (its retirement draws). Import them from
  their modules.
"""

from __future__ import annotations

from gigaevo.memory.v2.causal.arrowhead import (
    BlockDesign,
    BlockPosterior,
    BlockStatistics,
    block_posterior,
)
from gigaevo.memory.v2.causal.blr import (
    BayesianLinearHead,
    ConditionalPosterior,
    FitHealth,
    conditional_posterior,
)
from gigaevo.memory.v2.causal.errors import DesignError, GainOutOfBoundsError
from gigaevo.memory.v2.causal.features import (
    DesignSpace,
    RewardDefinition,
    behaviour_transform,
    context_features,
    measurement_sd,
    progress_feature,
)
from gigaevo.memory.v2.causal.invalidity import (
    Acceptance,
    LogisticLaplaceHead,
    acceptance_probability,
)
from gigaevo.memory.v2.causal.lineage import (
    LineageEdge,
    LineageOutcome,
    LineageRoot,
    archive_disposition,
    assign_credit,
    lineage_outcomes,
    raw_feasible_interval,
    root_outcome,
)
from gigaevo.memory.v2.causal.ope import (
    GateValue,
    IttSummary,
    gate_value,
    itt_scores,
    itt_summary,
    offer_gate_report,
)
from gigaevo.memory.v2.causal.policy import (
    ArmValues,
    CandidateRow,
    CardSummary,
    Draw,
    Proposal,
    WorldVotes,
    abstain_proposal,
    arm_values,
    candidate_rows,
    decide,
    draw_decision,
    eligible_candidates,
    head_allows_selection,
    hurdle_values,
    is_normalised,
    match_worlds,
    proposal_distribution,
    rng_stream,
    summarise_card,
)
from gigaevo.memory.v2.causal.quadrature import QuadratureNodes, adaptive_gauss_legendre
from gigaevo.memory.v2.causal.selection import (
    CandidateCard,
    CandidateSet,
    Selection,
    SelectionConfig,
    select,
)

__all__ = [
    "Acceptance",
    "ArmValues",
    "BayesianLinearHead",
    "BlockDesign",
    "BlockPosterior",
    "BlockStatistics",
    "CandidateCard",
    "CandidateRow",
    "CandidateSet",
    "CardSummary",
    "ConditionalPosterior",
    "DesignError",
    "DesignSpace",
    "Draw",
    "FitHealth",
    "GainOutOfBoundsError",
    "GateValue",
    "IttSummary",
    "LineageEdge",
    "LineageOutcome",
    "LineageRoot",
    "LogisticLaplaceHead",
    "Proposal",
    "QuadratureNodes",
    "RewardDefinition",
    "Selection",
    "SelectionConfig",
    "WorldVotes",
    "abstain_proposal",
    "acceptance_probability",
    "adaptive_gauss_legendre",
    "archive_disposition",
    "arm_values",
    "assign_credit",
    "behaviour_transform",
    "block_posterior",
    "candidate_rows",
    "conditional_posterior",
    "context_features",
    "decide",
    "draw_decision",
    "eligible_candidates",
    "gate_value",
    "head_allows_selection",
    "hurdle_values",
    "is_normalised",
    "itt_scores",
    "itt_summary",
    "lineage_outcomes",
    "match_worlds",
    "measurement_sd",
    "offer_gate_report",
    "progress_feature",
    "proposal_distribution",
    "raw_feasible_interval",
    "rng_stream",
    "root_outcome",
    "select",
    "summarise_card",
]
