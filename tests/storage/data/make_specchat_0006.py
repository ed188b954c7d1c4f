# Run at commit 6db7e06 (revision 0006_documents, before branches) to make specchat-0006.db.gz:
#   git worktree add /tmp/head 6db7e06 && cd /tmp/head && PYTHONPATH=. python <this file> specchat-0006.db && gzip -n
"""Made with specchat at 6db7e06 (revision 0006_documents): a database a user of that version has."""
import sys
from pathlib import Path

from specchat.documents.reading import document_from_text
from specchat.storage import Store, open_database

path = Path(sys.argv[1])
store = Store(open_database(path))
session = store.start_app_session("0.6-before-branches")
chat = store.create_conversation("Otters", system_prompt="Be brief.")
q = store.add_message(chat.id, "user", "Tell me about otters.")
store.documents.attach(q.id, document_from_text("otters.md", "Otters are mustelids.\n\nThey hold hands while "
                                                "sleeping.\n\nSea otters use stones as tools."), 42)
a = store.add_message(chat.id, "assistant", "Otters are semiaquatic mustelids.", spans=[(0, 6, "target"),
                                                                                     (6, 33, "draft")],
                      finish_reason="eos")
store.record_run({"message_id": a.id, "conversation_id": chat.id, "app_session_id": session, "target": "embedded",
                  "drafter": "pld", "k": 4, "adaptive": True, "temperature": 0.0, "top_p": 1.0, "top_k": 0,
                  "seed": 7, "device": "cpu", "new_tokens": 9, "target_passes": 5, "draft_proposed": 6,
                  "draft_accepted": 4, "exactness": "bit-identical"})
store.add_message(chat.id, "user", "And sea otters?")
store.add_message(chat.id, "assistant", "They float", stopped=True, finish_reason="cancelled")
other = store.create_conversation("Empty chat")
third = store.create_conversation("Ünïcode ✓")
store.add_message(third.id, "user", "naïve café")
store.save_calibration("embedded", "cpu", "q8_0", 95.5)
store.end_app_session(session)
store.close()
