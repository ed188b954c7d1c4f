"""What a race lane shows at a moment of its replay: the tests' own reading of a Track, to hold the window to."""


def chars_at(track, t: float) -> int:
    """How much of `track`'s text was on screen t seconds after its start (a token inside a multi-byte character
    adds nothing yet): the end of the last span of the tokens ready by then."""
    n = track.tokens_at(t)
    return max((end for _, end in track.spans[:n]), default=0)
