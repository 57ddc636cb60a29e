"""Views of the scene storage: a kernel argument that is the storage with attributes added (compile-time
switches, extra fields), one per storage so that kernels compile once against it."""


class StorageView:
    """Every attribute of the storage ``base``, plus the subclass's own. ``of(st)`` returns the one view of st,
    kept on st as the attribute ``ATTR``."""

    ATTR = None

    def __init__(self, st):
        self.base = st

    def __getattr__(self, name):          # only called for names the view itself does not have
        return getattr(self.__dict__["base"], name)

    @classmethod
    def of(cls, st):
        view = getattr(st, cls.ATTR, None)
        if view is None:
            view = cls(st)
            setattr(st, cls.ATTR, view)
        return view
