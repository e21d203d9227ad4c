"""Errors raised before any rank starts."""


class ScheduleError(ValueError):
    """The schedule does not fit the program (unknown map, wrong grid rank or size, inconsistent grids)."""


class UnsupportedPattern(ValueError):
    """A communication constraint that no available solver can implement.

    The message names the array, the symbolic subset and the reason.
    """

    def __init__(self, array, subset, reason):
        self.array, self.subset, self.reason = array, subset, reason
        super().__init__(f"cannot distribute array '{array}' with subset [{subset}]: {reason}")


class FrontendError(ValueError):
    """A model the front ends cannot translate: an unsupported operator or a dynamic shape.

    The message names the operator (or tensor) and the graph node it belongs to.
    """
