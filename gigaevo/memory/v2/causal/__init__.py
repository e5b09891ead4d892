"""Causal statistics of the card memory (memory=v2): pure, I/O-free.

Modules and the MODEL.md sections they implement:

- ``features``: section 1 (gains, feasible intervals, measurement sd), section 2 (context
  features), section 3 "Design" (design rows z_a, prior blocks).
- ``quadrature``: section 3 "Residual scale" (adaptive Gauss-Legendre on tau = ln sigma).
- ``arrowhead``: section 3 "Computation" (block-arrowhead design, Schur-complement solve,
  factored draws and marginal variances).
- ``blr``: section 3 (conjugate conditional posterior, sigma mixture, health, draws) on a dense
  design (reference) or a ``BlockDesign`` (Schur path).
- ``invalidity``: section 5 (logistic MAP + Laplace, chance constraint P_acc).
- ``policy``: section 6 (world values, probability matching, challenger exploration, RNG streams,
  proposal and offer draws, joint propensity).
- ``selection``: sections 6.3-6.7 composed (gate, safe set, worlds, proposal, draws,
  nuisances) for one decision from fitted heads.
- ``ope``: section 7 (ITT DR / IPS, conditional-offer AIPW with ESS, max weight, clustered SE).
- ``lineage``: section 4.1 (delayed-lineage maturity, breadth-first scan, residual g^L,
  exclusive credit across roots).

- ``retirement``: section 8 (practical threshold, eligibility checks, viability with the Wilson
  bound, per-card judgement); ``projection``: the exact bivariate law of a card's two arm
  predictors under a fitted head (its retirement draws). Import them from their modules.
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
    maturity_ordinal,
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
    "maturity_ordinal",
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
