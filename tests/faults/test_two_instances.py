"""One window per database: a second start hands over to the first, which comes to the front."""

from specchat.ui.single_instance import SingleInstance, server_name


def test_a_second_start_hands_over_to_the_first(qtbot, tmp_path):
    first = SingleInstance(tmp_path / "specchat.db")
    assert first.claim()
    try:
        with qtbot.waitSignal(first.activated, timeout=5000):
            assert not SingleInstance(tmp_path / "specchat.db").claim()  # the second start exits
        assert SingleInstance(tmp_path / "other.db").claim()  # another database: its own instance
    finally:
        first.release()


def test_a_socket_left_by_a_crashed_instance_is_claimed_anew(qtbot, tmp_path):
    gone = SingleInstance(tmp_path / "specchat.db")
    assert gone.claim()
    gone.release()  # what a crash leaves: nobody listening
    again = SingleInstance(tmp_path / "specchat.db")
    assert again.claim() and again.server is not None
    again.release()


def test_the_name_is_per_user_and_database(tmp_path):
    assert server_name(tmp_path / "a.db") != server_name(tmp_path / "b.db")
    assert server_name(tmp_path / "a.db") == server_name(tmp_path / "." / "a.db")
