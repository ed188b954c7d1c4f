"""The draft head's third and fourth rounds of training prompts: more varied than the first two rounds' templates.

The first two rounds (prompts.py) ask about a topic list in a few fixed phrasings. The head trained on them accepted
0.62 at the first draft position on held-out replies to such prompts but only 0.42 on the benchmark suite, lowest on
short factual questions, summaries of documents and rewrites. These rounds cover what the templates lacked, still
without using the suite: short factual questions with answer-length constraints, everyday requests in the first
person, writing with a given form and audience, documents of several kinds (news stories, meeting transcripts, email
threads, product pages, how-to guides, stories) to summarize, rewrite and extract from, and follow-up turns that
revise an earlier reply (multi-turn conversations). Round 3 is self-contained; round 4 builds on replies from rounds
1 and 3 (the documents the target itself wrote, the conversations to follow up). The same overlap filter as the
first rounds keeps every prompt apart from the suite.
"""

from __future__ import annotations

import random
from typing import Sequence

from .prompts import FIRST, LAST, REPLY, TOPICS, TrainingPrompt, _person, _unique, with_reply

TYPOS_PLACEHOLDER = "{reply with typos}"

COUNTRIES = ("France", "Japan", "Canada", "Brazil", "Kenya", "Egypt", "Norway", "Peru", "Vietnam", "Italy", "Germany",
             "Spain", "Mexico", "Argentina", "India", "Turkey", "Greece", "Sweden", "Poland", "Chile", "Morocco",
             "Thailand", "Portugal", "Ireland", "New Zealand", "South Korea", "Nigeria", "Indonesia", "Finland",
             "Austria", "Hungary", "Colombia", "Ghana", "Switzerland", "the Netherlands", "Belgium", "Denmark",
             "Cuba", "Iceland", "Ethiopia")
WORKS = ("Pride and Prejudice", "Moby-Dick", "War and Peace", "The Odyssey", "Don Quixote", "Frankenstein",
         "Hamlet", "The Little Prince", "One Hundred Years of Solitude", "The Great Gatsby", "Jane Eyre",
         "Crime and Punishment", "The Hobbit", "Macbeth", "Les Miserables", "Alice's Adventures in Wonderland")
PAINTINGS = ("the Mona Lisa", "The Starry Night", "The Scream", "Girl with a Pearl Earring", "The Last Supper",
             "Water Lilies", "The Persistence of Memory", "Guernica")
INVENTIONS = ("the telephone", "the light bulb", "the printing press", "the World Wide Web", "the airplane",
              "penicillin", "the steam engine", "the radio", "the periodic table", "the theory of relativity")
EXTREMES = ("the tallest mountain", "the largest ocean", "the longest river", "the biggest desert", "the largest "
            "planet in our solar system", "the smallest planet in our solar system", "the fastest land animal",
            "the largest animal", "the deepest lake", "the most spoken language", "the hottest planet",
            "the largest country by area")
COUNTS = ("days are there in a leap year", "bones are there in the adult human body", "players are on a soccer "
          "team", "planets are in the solar system", "legs does a spider have", "minutes are there in a day",
          "sides does a hexagon have", "strings does a standard guitar have", "keys are on a standard piano",
          "teeth does an adult usually have", "hearts does an octopus have", "time zones does Russia have",
          "states are there in the United States", "weeks are there in a year")
PROPERTIES = ("the freezing point of water in degrees Fahrenheit", "the speed of sound in air", "the chemical "
              "symbol for gold", "the chemical symbol for iron", "the chemical formula of table salt",
              "the atomic number of carbon", "the distance from the Earth to the Moon", "the speed of light",
              "the normal human body temperature", "the melting point of ice", "the square root of 144",
              "the population of the world, roughly")
WHYS = ("do leaves change color in autumn", "is the ocean salty", "do we have seasons", "does ice float on water",
        "do cats purr", "do stars twinkle", "do onions make us cry", "does the Moon change shape", "do birds "
        "migrate", "do we yawn", "does bread rise", "is the Dead Sea so salty", "do our ears pop on airplanes",
        "does metal feel colder than wood", "do we need sleep", "is the grass green")
CONCEPTS = ("gravity", "inflation", "DNA", "an atom", "a black hole", "democracy", "a volcano", "the greenhouse "
            "effect", "machine learning", "a vaccine", "evaporation", "an ecosystem", "a prime number", "electricity",
            "a recession", "plate tectonics", "osmosis", "a leap year", "an eclipse", "a food chain", "erosion",
            "a budget", "a credit score", "an algorithm")
DEVICES = ("a refrigerator", "a microwave oven", "a compass", "a bicycle's gears", "a thermometer", "a solar panel",
           "a smoke detector", "a touchscreen", "a hearing aid", "an elevator", "a vending machine", "GPS")
PAIRS = (("weather", "climate"), ("a virus", "a bacterium"), ("a lake", "a pond"), ("speed", "velocity"),
         ("a crocodile", "an alligator"), ("baking soda", "baking powder"), ("an asteroid", "a comet"),
         ("a frog", "a toad"), ("a hurricane", "a tornado"), ("RAM", "storage"), ("a simile", "a metaphor"),
         ("an ocean", "a sea"))
LENGTHS = ("", " Answer in one sentence.", " Answer in two or three sentences.", " Keep it short.",
           " Explain it so a child could understand.", " Give a short answer and then one interesting detail.")

SITUATIONS = ("I have a long flight next week", "my apartment is very small", "I just moved to a new city and "
              "don't know anyone", "I want to spend less on groceries", "I keep waking up tired", "my kids are "
              "bored during the school holidays", "I have guests coming over for dinner on Friday", "I want to "
              "learn to play the guitar", "I have a job interview on Thursday", "it's my partner's birthday next "
              "week", "I'm trying to drink less coffee", "I work from home and feel a bit lonely", "I want to start "
              "a small vegetable garden", "I have an exam in two weeks", "my neighbor's dog barks all night",
              "I get stressed before presentations", "I want to read more books this year", "I only have twenty "
              "minutes for lunch", "I'm visiting Lisbon for a weekend", "I need a gift for a coworker who is "
              "retiring", "my bike has a flat tire", "I want to wake up earlier", "I'm hosting a picnic on Sunday",
              "my laptop has become really slow", "I want to make new friends as an adult", "I'm learning to "
              "cook", "I'm going camping for the first time", "I have a free evening and no plans")
ASKS = ("Any tips?", "What would you suggest?", "What are three things I could do?", "Can you give me a simple "
        "plan?", "What should I keep in mind?", "Where do I start?", "What would you do in my place?")
ANIMALS = ("giraffes", "dolphins", "owls", "elephants", "bees", "penguins", "koalas", "crows", "sloths",
           "sea turtles", "hedgehogs", "otters", "flamingos", "wolves")
INGREDIENTS = ("pasta", "tomatoes", "garlic", "cheese", "potatoes", "beans", "spinach", "chicken", "tofu",
               "lentils", "carrots", "bread", "yogurt", "apples", "oats", "mushrooms", "a can of tuna", "zucchini")

NATURE = ("autumn leaves", "a summer storm", "the ocean at night", "a quiet forest", "spring rain", "a mountain lake",
          "the full moon", "morning fog", "a desert sunset", "a city at dawn", "falling cherry blossoms")
SUBJECTS = ("a dog waiting at the door", "a rainy Monday", "an old bicycle", "a cup of tea", "a garden in spring",
            "a train at night", "a grandmother's kitchen", "the last day of summer", "a lost umbrella")
PRODUCTS = ("a bamboo cutting board", "noise-cancelling headphones", "a folding bike", "a ceramic teapot",
            "a solar phone charger", "a wool blanket", "a smart alarm clock", "a hiking backpack", "a cast-iron pan",
            "a reading lamp with a dimmer", "a standing desk", "an electric kettle", "running shoes",
            "a robot vacuum cleaner")
EMAILS = ("my manager asking for Friday off", "a colleague thanking her for help with a report", "my neighbor about "
          "a package delivered to the wrong door", "a customer apologizing for a late delivery", "my son's teacher "
          "asking about the school trip", "a hotel asking whether they have parking", "my team announcing a new "
          "meeting time", "a plumber asking for a quote to fix a leaking tap", "a client confirming our meeting "
          "next Tuesday", "the gym asking to pause my membership")
JOBS = ("junior web developer", "nurse", "accountant", "graphic designer", "sales assistant", "primary school "
        "teacher", "marketing coordinator", "lab technician", "warehouse supervisor", "customer support agent")
EMPLOYERS = ("a hospital", "a bank", "a bookshop", "a software startup", "a museum", "a travel agency",
             "a supermarket chain", "an energy company")
OCCASIONS = ("birthday toast", "retirement speech", "graduation toast", "thank-you speech", "farewell speech")
EVENTS = ("a new public library opening", "a lost dog found after a week", "a charity fun run", "a bakery winning a "
          "national prize", "a storm knocking out power", "a school robotics team winning a contest", "a river "
          "clean-up day", "the farmers market moving to a new square", "a summer music festival", "a new bus line",
          "a record heat wave", "a community garden harvest", "a museum reopening after renovation")
TOWNS = ("Ashford", "Brookvale", "Cedar Falls", "Dunmore", "Elmstead", "Fairhaven", "Glenwood", "Harlow",
         "Kingsbridge", "Larkspur", "Northam", "Redcliff", "Stonebury", "Westmere")
PLOTS = ("finds an old map in the attic", "misses the last train home", "opens a tiny bakery", "learns to swim at "
         "seventy", "adopts a stray cat", "gets lost in a snowstorm", "builds a boat", "enters a cooking contest",
         "writes letters to a stranger", "plants a tree for every birthday")
CHARACTERS = ("a shy librarian", "an old fisherman", "a young inventor", "a retired pilot", "a street musician",
              "a curious girl", "a tired nurse", "a baker")
GUIDES = ("changing a bike tire", "making cold brew coffee", "repotting a plant", "setting up a strong password",
          "cleaning a laptop keyboard", "packing a suitcase efficiently", "writing a to-do list that works",
          "brewing green tea", "hanging a picture frame", "starting a compost bin")


def third_round_prompts(count: int, seed: int) -> list[TrainingPrompt]:
    """Self-contained prompts: factual questions, everyday requests, writing with a form, and documents."""
    rng = random.Random(seed + 3)
    makers = ((_factual, 4), (_everyday, 3), (_writing, 3), (_document, 3))
    weighted = [maker for maker, weight in makers for _ in range(weight)]
    prompts = [weighted[i % len(weighted)](rng) for i in range(count)]
    rng.shuffle(prompts)
    return _unique(prompts)


def _factual(rng: random.Random) -> TrainingPrompt:
    a, b = rng.choice(PAIRS)
    question = rng.choice((
        f"What is the capital of {rng.choice(COUNTRIES)}?", f"Which continent is {rng.choice(COUNTRIES)} in?",
        f"What language is mainly spoken in {rng.choice(COUNTRIES)}?", f"Who wrote {rng.choice(WORKS)}?",
        f"Who painted {rng.choice(PAINTINGS)}?", f"Who invented {rng.choice(INVENTIONS)}?",
        f"What is {rng.choice(EXTREMES)}?", f"How many {rng.choice(COUNTS)}?", f"What is {rng.choice(PROPERTIES)}?",
        f"Why {rng.choice(WHYS)}?", f"What is {rng.choice(CONCEPTS)}?", f"How does {rng.choice(DEVICES)} work?",
        f"What is the difference between {a} and {b}?", f"Can you explain {rng.choice(CONCEPTS)} in simple terms?",
    ))
    return TrainingPrompt("qa", question + rng.choice(LENGTHS))


def _everyday(rng: random.Random) -> TrainingPrompt:
    kind = rng.randrange(4)
    if kind == 0:
        situation = rng.choice(SITUATIONS)
        text = f"{situation[0].upper()}{situation[1:]}. {rng.choice(ASKS)}"
    elif kind == 1:
        greeting = rng.choice(("Hello!", "Hi there!", "Good morning!", "Hey!"))
        text = f"{greeting} {rng.choice(('Tell me something surprising about', 'What is a fun fact about', 'Share one interesting thing about'))} {rng.choice(ANIMALS)}."
    elif kind == 2:
        items = rng.sample(INGREDIENTS, rng.randint(3, 5))
        text = f"I have {', '.join(items[:-1])} and {items[-1]}. What could I make for {rng.choice(('dinner', 'lunch', 'a quick snack', 'two people'))}?"
    else:
        text = rng.choice((f"Can you recommend a few {rng.choice(('books', 'podcasts', 'board games', 'indoor plants', 'day trips'))} for someone who likes {rng.choice(TOPICS)}?",
                           f"How would a complete beginner get into {rng.choice(('jogging', 'journaling', 'drawing', 'saving for a holiday', 'eating more vegetables', 'meditating'))}?",
                           f"{rng.choice(('My driving test', 'A first date', 'Speaking at a wedding', 'Moving abroad', 'My first marathon'))} is coming up and I feel anxious. How can I prepare?"))
    return TrainingPrompt("chat", text)


def _writing(rng: random.Random) -> TrainingPrompt:
    name = rng.choice(FIRST)
    text = rng.choice((
        f"Write a haiku about {rng.choice(NATURE)}.",
        f"Write a rhyming poem of {rng.choice(('four', 'six', 'eight'))} lines about {rng.choice(SUBJECTS)}.",
        f"Give me a two- or three-sentence sales blurb for {rng.choice(PRODUCTS)}.",
        f"Write a short email to {rng.choice(EMAILS)}.",
        f"Draft the first paragraph of my cover letter: I am applying to be a {rng.choice(JOBS)} at {rng.choice(EMPLOYERS)}.",
        f"Write a short {rng.choice(OCCASIONS)} for my friend {name}, who loves {rng.choice(TOPICS)}. Keep it to about "
        f"{rng.randint(3, 6)} sentences.",
        f"Write a slogan and a two-sentence pitch for {rng.choice(PRODUCTS)}.",
    ))
    return TrainingPrompt("writing", text)


def _document(rng: random.Random) -> TrainingPrompt:
    """Asks the target to write a document: the reply is training data and, in round 4, a passage to work on."""
    text = rng.choice((
        f"Write a short news story of about 100 words about {rng.choice(EVENTS)} in the town of {rng.choice(TOWNS)}.",
        f"Write a short story of about 120 words about {rng.choice(CHARACTERS)} who {rng.choice(PLOTS)}.",
        f"Write a product description for an online shop for {rng.choice(PRODUCTS)}, with its size, main features "
        f"and price.",
        f"Write a short how-to guide on {rng.choice(GUIDES)}.",
    ))
    return TrainingPrompt("writing", text)


FOLLOW_UPS = ("Please shorten it.", "Can you make that shorter, under 30 words?", "Give me just the main points "
              "as a numbered list.", "Can you put that more simply?", "Translate your answer into French.",
              "Translate that into Spanish.", "Can you give me one more example?", "Summarize your answer in one "
              "sentence.", "Rewrite it in a more formal tone.", "Turn that into a bulleted list.", "Make it more "
              "fun.", "Which one of those would you pick, and why?", "Add a short title to it.", "Now write it for "
              "a ten-year-old.", "Can you say more about the first point?")
DOC_KINDS = ("text", "article", "passage", "story", "document")


def fourth_round_prompts(conversations: Sequence[tuple[str, str]], documents: Sequence[str], count: int,
                         seed: int) -> list[TrainingPrompt]:
    """Follow-up turns on earlier conversations (prompt, reply), and summarization, rewriting and extraction over
    documents (the target's own, from round 3) and over templated transcripts, email threads and records."""
    rng = random.Random(seed + 4)
    prompts = []
    for i in range(count):
        slot = i % 5
        if slot in (0, 1) and conversations:
            prompt, reply = rng.choice(conversations)
            prompts.append(TrainingPrompt("chat", rng.choice(FOLLOW_UPS), history=(prompt, reply)))
        elif slot == 2:
            prompts.append(_summarize(rng, _passage(rng, documents)))
        elif slot == 3:
            prompts.append(_rewrite(rng, _passage(rng, documents)))
        else:
            prompts.append(_extract(rng))
    return _unique(prompts)


def _passage(rng: random.Random, documents: Sequence[str]) -> tuple[str, str, bool]:
    """(kind, text, whether the text is one of the target's documents): one of those documents, or a templated
    transcript or email thread."""
    pick = rng.randrange(4)
    if pick == 0:
        return "meeting transcript", _transcript(rng), False
    if pick == 1:
        return "email thread", _email_thread(rng), False
    if not documents:
        return "meeting transcript", _transcript(rng), False
    return rng.choice(DOC_KINDS), rng.choice(documents), True


def _summarize(rng: random.Random, passage: tuple[str, str, bool]) -> TrainingPrompt:
    kind, text, from_target = passage
    n = rng.randint(2, 4)
    ask = rng.choice((f"In {n - 1} or {n} sentences, summarize the {kind} below.",
                      f"Give a summary of this {kind} in {n} bullet points.",
                      f"Write a one-paragraph summary of this {kind} for a busy reader.",
                      f"What are the main points of the following {kind}? Include any decisions and dates.",
                      f"Summarize this {kind} in one sentence."))
    if from_target:
        return with_reply("summarization", f"{ask}\n\n{REPLY}", text)
    return TrainingPrompt("summarization", f"{ask}\n\n{text.strip()}")


def _rewrite(rng: random.Random, passage: tuple[str, str, bool]) -> TrainingPrompt:
    _, original, from_target = passage
    text = original.strip()
    choice = rng.randrange(6)
    if choice == 0:
        ask = "Correct the spelling and grammar in the text below. Change nothing else."
        shown = _with_typos(rng, text)
        if from_target:
            return with_reply("rewriting", f"{ask}\n\n{TYPOS_PLACEHOLDER}", original, shown, TYPOS_PLACEHOLDER)
        return TrainingPrompt("rewriting", f"{ask}\n\n{shown}")
    ask = ("Rewrite the text below in the past tense, changing nothing else.",
           "Rewrite the text below so it sounds formal and professional. Keep every detail.",
           "List the main points of the text below as bullets, using its own words.",
           "Give the following text a short title. Keep the text itself exactly as it is.",
           "Rewrite the following text in the present tense.")[choice - 1]
    if from_target:
        return with_reply("rewriting", f"{ask}\n\n{REPLY}", original)
    return TrainingPrompt("rewriting", f"{ask}\n\n{text}")


TYPOS = {"their": "there", "receive": "recieve", "because": "becuase", "definitely": "definately", "separate":
         "seperate", "until": "untill", "which": "wich", "believe": "beleive", "weird": "wierd", "tomorrow":
         "tommorow", "really": "realy", "friend": "freind", "beginning": "begining", "were": "was"}


def _with_typos(rng: random.Random, text: str) -> str:
    """About one word in twelve misspelled: a known slip where there is one, else two letters swapped."""
    words = text.split(" ")
    for i, word in enumerate(words):
        if rng.random() < 1 / 12 and word.isalpha():
            lower = word.lower()
            if lower in TYPOS:
                words[i] = TYPOS[lower]
            elif len(word) > 3:
                j = rng.randrange(1, len(word) - 2)
                words[i] = word[:j] + word[j + 1] + word[j] + word[j + 2:]
    return " ".join(words)


MEETING_TOPICS = ("the office move", "the summer party", "the new onboarding process", "next quarter's budget",
                  "the customer survey results", "the mobile app release", "the warehouse schedule",
                  "the charity bake sale")
DAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday")


def _transcript(rng: random.Random) -> str:
    a, b, c = rng.sample(FIRST, 3)
    topic = rng.choice(MEETING_TOPICS)
    task1, task2 = rng.sample(("send the invitations", "update the spreadsheet", "call the supplier", "book the room",
                               "draft the announcement", "check the numbers", "order the equipment",
                               "write the summary"), 2)
    return "\n".join((
        f"{a}: Thanks for joining. Today we need to settle {topic}.",
        f"{b}: I looked into it. " + rng.choice((f"It will cost about {rng.randint(2, 40)} thousand euros.",
                                                 f"We are {rng.randint(2, 15)} days behind schedule.",
                                                 f"About {rng.randint(10, 90)} percent of the work is done.")),
        f"{c}: Then I suggest we {rng.choice(('move the deadline by a week', 'split the work into two phases', 'ask for more help', 'keep the plan as it is'))}.",
        f"{a}: Agreed. {b}, can you {task1} by {rng.choice(DAYS)}?",
        f"{b}: Yes, I'll do that.",
        f"{a}: And {c}, please {task2}. We meet again on {rng.choice(DAYS)}.",
    ))


def _email_thread(rng: random.Random) -> str:
    a, b = rng.sample(FIRST, 2)
    subject, ask, answer = rng.choice((
        ("Team lunch", "Shall we take the team out for lunch next week? Any place you'd suggest?",
         "Good idea. The new Thai place near the station has a big table; Thursday works for me."),
        ("Printer order", "Our printer is broken again. Should we order a new one or repair it?",
         "Repairing costs almost as much as a new one, so let's order a new one this week."),
        ("Conference trip", "Are we still sending two people to the conference in May?",
         "Yes, but only if we book the hotel before Friday. Can you do that?"),
        ("Holiday cover", "I'm away from the 3rd to the 10th. Could you cover my customer calls?",
         "Sure, send me the list of open cases and I'll take them."),
    ))
    return (f"From: {a}\nTo: {b}\nSubject: {subject}\nHi {b}, {ask} Thanks, {a}\n\n"
            f"From: {b}\nTo: {a}\nSubject: Re: {subject}\nHi {a}, {answer} Best, {b}")


def _extract(rng: random.Random) -> TrainingPrompt:
    kind = rng.randrange(3)
    if kind == 0:
        items = rng.sample(("flat white", "croissant", "bagel", "orange juice", "muffin", "tea", "sandwich"), 3)
        lines = "\n".join(f"{item} x{rng.randint(1, 4)} @ {rng.randint(2, 9)}.{rng.choice(('00', '50', '90'))}"
                          for item in items)
        doc = (f"RECEIPT #{rng.randint(10000, 99999)}\nDate: {rng.randint(1, 28)} "
               f"{rng.choice(('May', 'June', 'July', 'October'))} 2025\nStore: {rng.choice(TOWNS)} Coffee\n{lines}")
        what = "the receipt number, the date, the store and the items (name, quantity, price)"
    elif kind == 1:
        name = f"{rng.choice(FIRST)} {rng.choice(LAST)}"
        doc = (f"{name}\n{name.split()[0].lower()}@example.net | {rng.choice(TOWNS)}\n\nEXPERIENCE\n"
               f"{rng.choice(JOBS).title()}, {rng.choice(LAST)} Ltd (2021-present)\n"
               f"SKILLS: {', '.join(rng.sample(('Excel', 'SQL', 'Python', 'customer service', 'scheduling', 'Spanish', 'design'), 3))}")
        what = "the name, email, town, current job and skills"
    else:
        people = [f"{_person(rng)} - {rng.randint(200, 999)}-{rng.randint(1000, 9999)}" for _ in range(rng.randint(3, 5))]
        doc = "Volunteers list\n" + "\n".join(people)
        what = "every person with their phone number"
    return TrainingPrompt("extraction", f"Extract {what} from this text. Return the result as JSON.\n\n{doc}")
