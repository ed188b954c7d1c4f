"""Counting a Store's calls by name, in order: what a chat reply reads and writes (tests/chats, tests/ui)."""


def count_calls(store, names, monkeypatch) -> list[str]:
    """Wraps the Store methods `names` (still called) so that each call appends its name to the returned list."""
    calls: list[str] = []

    def spy(name):
        real = getattr(store, name)

        def call(*args, **kwargs):
            calls.append(name)
            return real(*args, **kwargs)
        return call

    for name in names:
        monkeypatch.setattr(store, name, spy(name))
    return calls
