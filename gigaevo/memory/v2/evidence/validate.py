"""Cross-row checks a terminal must pass against its decision before it is committed."""

from __future__ import annotations

from gigaevo.memory.v2.evidence.errors import RowRejectedError
from gigaevo.memory.v2.evidence.rows import DecisionRow, TerminalRow

GAIN_TOLERANCE = 1e-9


def check_terminal(decision: DecisionRow, row: TerminalRow) -> None:
    """Refuse a terminal that contradicts its decision.

    Raises:
        RowRejectedError: base id is not the decision's parent; metric or
            direction differ; the cited set is not a subset of {proposed id}
            or is non-empty although Z = 0 (or the decision abstained); a valid
            gain's y = g / R lies outside the parent's feasible interval
            [G-, G+] by more than 1e-9.
    """
    where = f"terminal of {row.decision_id!r}"
    if row.base_id != decision.context.parent_id:
        raise RowRejectedError(f"{where}: base id {row.base_id!r} is not the decision's parent")
    if (row.metric, row.direction) != (decision.reward.metric, decision.reward.direction):
        raise RowRejectedError(f"{where}: metric/direction differ from the decision's")
    if row.cited_ids:
        if decision.z != 1:
            raise RowRejectedError(f"{where}: cites {list(row.cited_ids)} but nothing was shown")
        if set(row.cited_ids) != {decision.proposed_id}:
            raise RowRejectedError(
                f"{where}: cited set {list(row.cited_ids)} is not {{{decision.proposed_id!r}}}"
            )
    if row.gain is not None:
        reward = decision.reward
        y = row.gain / (reward.upper - reward.lower)
        lo, hi = reward.gain_interval(decision.context.parent_fitness)
        if not (lo - GAIN_TOLERANCE <= y <= hi + GAIN_TOLERANCE):
            raise RowRejectedError(
                f"{where}: normalised gain {y:.6g} outside the feasible [{lo:.6g}, {hi:.6g}]"
            )
