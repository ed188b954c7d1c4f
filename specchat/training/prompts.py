"""Training prompts for draft distillation, written for this purpose and kept apart from the benchmark suite.

Prompts are built from templates and topic lists with a seeded RNG, so the same seed gives the same prompts.
They cover the suite's kinds of work (chat, writing, coding, rewriting, summarization, extraction, QA, math)
without reusing its texts: `drop_suite_overlap` removes every prompt that shares a run of
`OVERLAP_WORDS` words with any benchmark prompt, so the bench never measures text the draft was trained on.
Rewriting and summarization need source passages; those are the target's own replies from the first round
(see `second_round_prompts`) and synthetic documents, never the suite's passages.
"""

from __future__ import annotations

import json
import random
import re
from dataclasses import dataclass, field
from typing import Iterable, Sequence

OVERLAP_WORDS = 8
REPLY = "{reply}"  # where a template takes the target's reply to an earlier prompt (training/manifest.py)


@dataclass(frozen=True)
class TrainingPrompt:
    category: str
    text: str
    history: tuple[str, ...] = ()  # earlier turns, user and assistant alternating, for follow-up prompts
    # For a prompt whose text embeds a reply of the target: the text with a placeholder ({reply}, or
    # {reply with typos}) where that reply stands, and the reply as the generator was given it. Provenance for the
    # training manifest only: they take no part in comparisons.
    template: str | None = field(default=None, compare=False)
    reply: str | None = field(default=None, compare=False)
    # Keys of the manifest's sources its text comes from, when they are not its round's usual one.
    sources: tuple[str, ...] = field(default=(), compare=False)


TOPICS = """
volcanoes|the water cycle|honeybees|the moon landing|solar panels|electric cars|the Roman Empire|coral reefs|
black holes|vaccines|the printing press|recycling plastic|earthquakes|the human heart|penguins|the Great Wall of China|
rainforests|wind turbines|the stock market|inflation|compound interest|the internet|e-mail etiquette|sleep hygiene|
meditation|learning a new language|public speaking|time management|remote work|composting|bread baking|
coffee brewing|tea ceremonies|chess openings|the Olympic Games|marathon training|yoga for beginners|bird migration|
dinosaurs|the periodic table|magnets|rainbows|thunderstorms|glaciers|deserts|the Amazon river|the Sahara|
ancient Egypt|the Renaissance|the Industrial Revolution|jazz music|classical music|photography|watercolor painting|
knitting|gardening tomatoes|keeping chickens|adopting a dog|cat behavior|aquariums|budget travel|packing for a trip|
camping safely|first aid basics|healthy breakfasts|meal prepping|vegetarian cooking|food allergies|hand washing|
dental care|the immune system|DNA|evolution|climate change|renewable energy|nuclear power|the electric grid|
smartphones|password security|backing up files|spreadsheets|databases|open source software|robots|3D printing|
self-driving cars|drones|satellites|the International Space Station|Mars rovers|telescopes|the speed of light|
gravity|friction|sound waves|the ocean tides|sharks|whales|octopus camouflage|ants|butterflies|mushrooms|
bamboo|cactus care|apple orchards|wine making|cheese making|chocolate|the history of pizza|sushi|spices|
origami|board games|video game design|movie editing|podcasting|writing a novel|poetry forms|libraries|museums|
city parks|public transport|bicycle commuting|road safety|saving money|job interviews|writing a resume|
volunteering|friendship|moving to a new city|minimalism|decluttering a closet|houseplants in winter|birdwatching|
stargazing|the northern lights|lighthouses|trains|airplanes|hot air balloons|submarines|bridges|skyscrapers|
""".replace("\n", "").strip("|").split("|")

PEOPLE = ("a student", "a retired teacher", "a small bakery owner", "a nurse", "a software developer", "a farmer",
          "a ten-year-old", "a new parent", "a museum guide", "a bus driver", "a tourist", "a librarian")
TONES = ("cheerful", "serious", "calm", "enthusiastic", "gentle", "humorous", "concise", "friendly")
FORMS = ("limerick", "short poem", "two-paragraph story", "diary entry", "short speech", "riddle", "slogan",
         "short dialogue", "postcard message", "song chorus")

CHAT = (
    "I'd like to get into {topic}. Where should a complete beginner start?",
    "My friend keeps talking about {topic}. Can you explain why people find it interesting?",
    "Give me three practical tips related to {topic}.",
    "What are common mistakes people make with {topic}, and how can I avoid them?",
    "I only have ten minutes. Tell me the most useful thing to know about {topic}.",
    "Could you suggest a weekend plan that involves {topic}?",
    "What questions should I ask an expert on {topic}?",
    "Is {topic} something {person} could enjoy? Why or why not?",
)
WRITING = (
    "Write a {form} about {topic}.",
    "Compose a {tone} {form} that mentions {topic}.",
    "Draft a short blog introduction about {topic} for {person}.",
    "Write a {tone} thank-you note to {person} who taught me about {topic}.",
    "Write an advertisement of about fifty words for a workshop on {topic}.",
    "Create a catchy headline and a one-sentence teaser for an article on {topic}.",
    "Write a letter to a local newspaper arguing that our town needs more attention to {topic}.",
)
QA = (
    "What is {topic}? Give a clear explanation.",
    "How does {topic} work, in a few sentences?",
    "Explain {topic} to {person}.",
    "What are the main facts everyone should know about {topic}?",
    "List the pros and cons of {topic}.",
    "What is the history of {topic} in brief?",
    "Why does {topic} matter today?",
    "Compare {topic} with {other}. How are they similar and how do they differ?",
)
CODING_TASKS = (
    "reverses the words in a sentence", "counts the vowels in a string", "checks whether a number is prime",
    "returns the n-th Fibonacci number", "removes duplicate items from a list while keeping their order",
    "merges two sorted lists into one sorted list", "converts Celsius to Fahrenheit", "finds the second largest value "
    "in a list", "flattens a nested list", "counts how often each word appears in a text", "checks if two strings "
    "are anagrams", "computes the factorial of n", "returns the greatest common divisor of two integers",
    "validates a simple email address", "splits a list into chunks of size k", "capitalizes every word in a title",
    "sums the digits of an integer", "finds the longest word in a sentence", "rotates a list by k positions",
    "converts a binary string to an integer", "returns the median of a list of numbers", "transposes a matrix",
    "checks whether brackets in a string are balanced", "computes a running total of a list",
    "groups words by their first letter", "parses a date string like 2024-05-17 into year, month and day",
    "reads a CSV file and returns the rows as dictionaries", "finds all even numbers in a list",
)
LANGUAGES = ("Python", "Python", "Python", "JavaScript", "Java", "C", "Go", "Rust", "Bash", "TypeScript")
CODING = (
    "Write a {language} function that {task}.",
    "Show me how to write a {language} program that {task}, with a short explanation.",
    "In {language}, implement a function that {task}. Include an example call.",
    "Write a unit test in Python for a function that {task}.",
    "What is an efficient way to write code that {task}? Use {language}.",
)
SQL = (
    "Write an SQL query that lists all {things} whose {field} is above {n}.",
    "Write an SQL query that counts the {things} per {field}.",
    "Explain what this SQL does: SELECT {field}, COUNT(*) FROM {things} GROUP BY {field} HAVING COUNT(*) > {n};",
)


def first_round_prompts(count: int, seed: int) -> list[TrainingPrompt]:
    """Self-contained prompts (no source passage), mixed across categories."""
    rng = random.Random(seed)
    makers = ((_chat, 3), (_writing, 3), (_qa, 3), (_coding, 3), (_math, 2))
    weighted = [maker for maker, weight in makers for _ in range(weight)]
    prompts = [weighted[i % len(weighted)](rng) for i in range(count)]
    rng.shuffle(prompts)
    return _unique(prompts)


def second_round_prompts(passages: Sequence[str], count: int, seed: int) -> list[TrainingPrompt]:
    """Rewriting, summarization and extraction prompts over given passages and synthetic documents."""
    rng = random.Random(seed + 1)
    prompts = []
    for i in range(count):
        if i % 3 == 2 or not passages:
            prompts.append(_extraction(rng))
            continue
        passage = rng.choice(passages)
        maker = _rewriting if i % 3 == 0 else _summarization
        prompts.append(maker(rng, passage))
    return _unique(prompts)


def _fill(rng: random.Random, template: str) -> str:
    topic, other = rng.sample(TOPICS, 2)
    return template.format(topic=topic, other=other, person=rng.choice(PEOPLE), tone=rng.choice(TONES),
                           form=rng.choice(FORMS))


def _chat(rng: random.Random) -> TrainingPrompt:
    return TrainingPrompt("chat", _fill(rng, rng.choice(CHAT)))


def _writing(rng: random.Random) -> TrainingPrompt:
    return TrainingPrompt("writing", _fill(rng, rng.choice(WRITING)))


def _qa(rng: random.Random) -> TrainingPrompt:
    return TrainingPrompt("qa", _fill(rng, rng.choice(QA)))


def _coding(rng: random.Random) -> TrainingPrompt:
    if rng.random() < 0.15:
        things, field = rng.choice((("employees", "department"), ("books", "genre"), ("students", "grade"),
                                    ("products", "category"), ("flights", "airline")))
        text = rng.choice(SQL).format(things=things, field=field, n=rng.randint(2, 500))
        return TrainingPrompt("coding", text)
    text = rng.choice(CODING).format(language=rng.choice(LANGUAGES), task=rng.choice(CODING_TASKS))
    return TrainingPrompt("coding", text)


def _math(rng: random.Random) -> TrainingPrompt:
    a, b, c = rng.randint(3, 99), rng.randint(2, 40), rng.randint(2, 12)
    item = rng.choice(("apples", "stickers", "marbles", "books", "cookies", "tickets", "stamps", "coins"))
    name = rng.choice(("Lena", "Omar", "Kofi", "Ines", "Ravi", "Hana", "Mateo", "Zoe", "Arjun", "Elsa"))
    templates = (
        f"Calculate {a} plus {b} times {c}.",
        f"What is {a * c} divided by {c}?",
        f"{name} buys {c} bags of {item} with {b} {item} in each bag and eats {min(a, b * c)} of them. How many "
        f"{item} are left?",
        f"A bike rides at {b} km per hour for {c} hours. What distance does it cover?",
        f"What is {c * 5}% of {a * 10}?",
        f"Find the mean of {a}, {b}, {c} and {a + b}.",
        f"A square garden has sides of {c} meters. What is its area, and how much fencing goes around it?",
        f"If {c} friends share {a * c} {item} equally, how many does each friend get?",
        f"Solve for x: {c}x + {b} = {c * a + b}.",
        f"{name} saves {b} dollars a week. How much is saved after {c} weeks?",
        f"Convert {a} minutes into hours and minutes.",
        f"Is {a * b + 1} a prime number? Explain how you checked.",
    )
    return TrainingPrompt("math", rng.choice(templates))


REWRITES = (
    "Rewrite this text in a {tone} tone:\n\n{passage}",
    "Make the following text simpler, so that {person} can understand it:\n\n{passage}",
    "Shorten this text to about half its length without losing the key ideas:\n\n{passage}",
    "Turn this text into a numbered list of its main ideas:\n\n{passage}",
    "Proofread and improve the wording of the following text:\n\n{passage}",
    "Rewrite the text below in the first person:\n\n{passage}",
    "Paraphrase the following paragraph:\n\n{passage}",
)
SUMMARIES = (
    "Give a one-sentence summary of this text:\n\n{passage}",
    "What are the three key points of the following text?\n\n{passage}",
    "Write a TL;DR for this:\n\n{passage}",
    "Summarize this text for {person}:\n\n{passage}",
    "Condense the text below into a short paragraph:\n\n{passage}",
)


def _rewriting(rng: random.Random, passage: str) -> TrainingPrompt:
    template = rng.choice(REWRITES)
    tone, person = rng.choice(TONES), rng.choice(PEOPLE)
    return with_reply("rewriting", template.format(tone=tone, person=person, passage=REPLY), passage)


def _summarization(rng: random.Random, passage: str) -> TrainingPrompt:
    template = rng.choice(SUMMARIES)
    return with_reply("summarization", template.format(person=rng.choice(PEOPLE), passage=REPLY), passage)


def with_reply(category: str, template: str, reply: str, shown: str | None = None,
               placeholder: str = REPLY) -> TrainingPrompt:
    """A prompt whose text is `template` with the reply (stripped, or `shown` in its place) at `placeholder`."""
    text = template.replace(placeholder, reply.strip() if shown is None else shown, 1)
    return TrainingPrompt(category, text, template=template, reply=reply)


FIRST = ("Anna", "Bruno", "Chen", "Dana", "Emeka", "Farah", "Goran", "Hiro", "Isla", "Jonas", "Kemal", "Lucia",
         "Mina", "Nils", "Olga", "Pedro", "Rosa", "Sven", "Tara", "Umar")
LAST = ("Berg", "Costa", "Dubois", "Engel", "Fischer", "Garcia", "Holm", "Ito", "Jensen", "Kowalski", "Larsen",
        "Moreau", "Novak", "Okafor", "Petrov", "Quinn", "Rossi", "Silva", "Tanaka", "Weber")
GOODS = ("desk lamp", "notebook", "USB cable", "coffee mug", "backpack", "umbrella", "printer paper", "headphones",
         "water filter", "plant pot", "keyboard", "picture frame")
CITIES = ("Lisbon", "Oslo", "Nairobi", "Osaka", "Toronto", "Valencia", "Krakow", "Dublin", "Perth", "Quito")


def _person(rng: random.Random) -> str:
    return f"{rng.choice(FIRST)} {rng.choice(LAST)}"


def _date(rng: random.Random) -> str:
    return f"20{rng.randint(18, 26)}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"


def _synthetic_document(rng: random.Random) -> tuple[str, str]:
    """A structured document with random fields, and what to extract from it."""
    kind = rng.randrange(4)
    if kind == 0:
        lines = [f"- {rng.randint(1, 6)} x {g} @ {rng.randint(2, 90)}.{rng.randint(0, 99):02d}"
                 for g in rng.sample(GOODS, rng.randint(2, 4))]
        doc = (f"Order {rng.randint(1000, 9999)} placed {_date(rng)} by {_person(rng)}, shipping to "
               f"{rng.choice(CITIES)}.\nItems:\n" + "\n".join(lines))
        return doc, "the order number, the date, the buyer, the city and every item with its quantity"
    if kind == 1:
        people = [f"{_person(rng)}, {rng.choice(('engineer', 'designer', 'manager', 'analyst', 'intern'))}, "
                  f"ext. {rng.randint(100, 999)}" for _ in range(rng.randint(3, 5))]
        return "Team directory:\n" + "\n".join(people), "each person's name, role and extension"
    if kind == 2:
        levels = ("INFO", "WARN", "ERROR", "DEBUG")
        events = ("disk usage at {n}%", "connection reset by peer", "user {n} logged in", "cache miss for key {n}",
                  "request took {n} ms", "retrying job {n}")
        lines = [f"{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d} {rng.choice(levels)} "
                 f"{rng.choice(events).format(n=rng.randint(1, 999))}" for _ in range(rng.randint(4, 7))]
        return "Server log:\n" + "\n".join(lines), "the warnings and errors with their times"
    doc = (f"The {rng.choice(TOPICS)} club meets on {_date(rng)} at {rng.randint(9, 20)}:00 in the "
           f"{rng.choice(CITIES)} community hall. Entry costs {rng.randint(2, 30)} euros. Questions go to "
           f"{rng.choice(FIRST).lower()}@example.org.")
    return doc, "the event, the date, the time, the place, the price and the contact address"


def _extraction(rng: random.Random) -> TrainingPrompt:
    doc, what = _synthetic_document(rng)
    style = rng.choice(("as JSON", "as a bulleted list", "as a table", "in one line each"))
    return TrainingPrompt("extraction", f"Pull out {what} from the text below, {style}.\n\n{doc}")


def _unique(prompts: Iterable[TrainingPrompt]) -> list[TrainingPrompt]:
    seen, out = set(), []
    for prompt in prompts:
        key = (prompt.history, prompt.text)
        if key not in seen:
            seen.add(key)
            out.append(prompt)
    return out


def _words(text: str) -> list[str]:
    return re.findall(r"\w+", text.lower())


def _word_ngrams(text: str, n: int) -> set[tuple[str, ...]]:
    words = _words(text)
    return {tuple(words[i : i + n]) for i in range(len(words) - n + 1)}


def suite_texts(suite_jsonl: str) -> list[str]:
    """Every turn of every prompt in a Spec-Bench-style JSONL text."""
    texts = []
    for line in suite_jsonl.splitlines():
        if line.strip():
            texts.extend(json.loads(line)["turns"])
    return texts


def drop_suite_overlap(prompts: Sequence[TrainingPrompt], suite: Sequence[str],
                       n: int = OVERLAP_WORDS) -> tuple[list[TrainingPrompt], int]:
    """Prompts sharing no run of n words with any suite text, and how many were dropped. A prompt shorter than n
    words is dropped when the whole of it occurs in a suite text (a short question could otherwise be one of the
    suite's own)."""
    suite_words = [" " + " ".join(_words(text)) + " " for text in suite]
    banned = set().union(*(_word_ngrams(text, n) for text in suite)) if suite else set()

    def overlaps(prompt: TrainingPrompt) -> bool:
        words = _words(prompt.text)
        if len(words) < n:
            return any(" " + " ".join(words) + " " in text for text in suite_words)
        return bool(_word_ngrams(prompt.text, n) & banned)

    kept = [p for p in prompts if not overlaps(p)]
    return kept, len(prompts) - len(kept)
