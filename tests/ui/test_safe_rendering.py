"""Model output is untrusted: rendered as Markdown without HTML, loading nothing, and unable to trigger app actions."""

from PySide6.QtCore import QUrl
from PySide6.QtGui import QTextDocument

from specchat.ui.transcript import MessageView, Transcript

ICON = "resources/icons/specchat-256.png"


def fragments(document):
    block = document.begin()
    while block.isValid():
        iterator = block.begin()
        while not iterator.atEnd():
            yield iterator.fragment()
            iterator += 1
        block = block.next()


def test_a_hostile_reply_renders_as_inert_text(qtbot):
    from pathlib import Path

    icon = Path(__file__).resolve().parents[2] / ICON
    hostile = (f'Hi <span style="font-size:80px;color:red">big</span> <img src="file://{icon}"> '
               f'![x](file://{icon}) <style>body {{ color: red }}</style>\n\n<a href="specchat:edit/1">e</a>')
    transcript = Transcript()
    qtbot.addWidget(transcript)
    transcript.set_messages([MessageView(1, "assistant", hostile)])
    document = transcript.document()
    text = document.toPlainText()
    assert '<span style="font-size:80px;color:red">big</span>' in text  # tags shown as text, not applied
    assert f'<img src="file://{icon}">' in text and '<a href="specchat:edit/1">e</a>' in text
    assert all(f.charFormat().fontPointSize() < 40 for f in fragments(document))
    assert all(f.charFormat().foreground().color().name() != "#ff0000" for f in fragments(document))
    image = document.resource(QTextDocument.ResourceType.ImageResource, QUrl(f"file://{icon}"))
    assert image is not None and (image.width(), image.height()) == (1, 1)  # the local file was never read


def test_only_the_apps_own_links_act(qtbot):
    transcript = Transcript()
    qtbot.addWidget(transcript)
    reply = "[regenerate](specchat:regenerate/1) [edit](specchat:edit/1) [copy](http://x/copy/abc) [f](file:///x)"
    transcript.set_messages([MessageView(1, "user", "hello"), MessageView(2, "assistant", reply)])
    asked = []
    transcript.action_requested.connect(lambda action, ident: asked.append((action, ident)))
    hrefs = [f.charFormat().anchorHref() for f in fragments(transcript.document()) if f.charFormat().isAnchor()]
    written = [h for h in hrefs if "key=" not in h]
    assert written == ["specchat:regenerate/1", "specchat:edit/1", "http://x/copy/abc", "file:///x"]
    for href in written + ["specchat:regenerate/abc?key=x", "specchat:delete/2"]:
        transcript.anchorClicked.emit(QUrl(href))  # what a click on the link would do: nothing, and no error
    assert asked == []
    own = [h for h in hrefs if "key=" in h]
    assert [h.split("?")[0] for h in own] == ["specchat:edit/1", "specchat:copy/1", "specchat:fork/1",
                                              "specchat:delete/1", "specchat:copy/2", "specchat:fork/2",
                                              "specchat:regenerate/2", "specchat:delete/2"]
    for href in own:
        transcript.anchorClicked.emit(QUrl(href))
    assert asked == [("edit", 1), ("copy", 1), ("fork", 1), ("delete", 1),
                     ("copy", 2), ("fork", 2), ("regenerate", 2), ("delete", 2)]
    forged = own[0].replace("key=", "key=0")
    transcript.anchorClicked.emit(QUrl(forged))
    assert len(asked) == 8
