"""A training corpus of English sentences: templates, and free word sequences from a large word list.

Nothing is downloaded: every sentence is hand-written below, built by filling templates with
words chosen by a seeded random generator, or drawn word by word from `wordfreq`'s English list
(installed with the package; 20,000 words). The templates bring sentence shapes, numbers, prices,
times and punctuation; the free sequences bring a vocabulary of thousands of words in an order no
language model can guess, so that the voice learns to read the phonemes rather than to
continue familiar sentences. The corpus is the same on every machine.
"""

from __future__ import annotations

import functools
import random
import re
from dataclasses import dataclass
from ..errors import InputError

NAMES = (
    "Anna", "Ben", "Clara", "David", "Elena", "Felix", "Grace", "Hugo", "Iris", "Jonas", "Kate", "Leo",
    "Maria", "Nina", "Oscar", "Paula", "Quentin", "Rosa", "Samuel", "Tara", "Umar", "Vera", "Walter",
    "Xavier", "Yasmin", "Zoe", "Mr. Brown", "Dr. Patel", "my sister", "our teacher", "the old farmer",
    "the pilot", "the new neighbour", "a young doctor", "the captain", "my grandmother",
)
ANIMALS = (
    "cat", "dog", "horse", "rabbit", "fox", "owl", "whale", "tiger", "parrot", "goat", "sheep",
    "turtle", "dolphin", "eagle", "mouse", "bear", "camel", "penguin", "frog", "squirrel",
)
THINGS = (
    "book", "lamp", "bicycle", "letter", "window", "basket", "guitar", "camera", "umbrella", "ladder",
    "key", "map", "candle", "blanket", "radio", "bottle", "clock", "jacket", "kettle", "notebook",
    "hammer", "mirror", "pencil", "suitcase", "telescope", "violin", "wallet", "helmet", "compass",
)
FOODS = (
    "bread", "soup", "apples", "cheese", "rice", "oranges", "coffee", "tea", "chocolate", "pasta",
    "tomatoes", "honey", "lemonade", "carrots", "pancakes", "strawberries", "noodles", "butter",
)
PLACES = (
    "the station", "the library", "the market", "the river", "the mountains", "the harbour", "the garden",
    "the museum", "the hospital", "the airport", "the beach", "the village", "the forest", "the office",
    "the bakery", "the stadium", "the castle", "the bridge", "the school", "the island", "London",
    "Paris", "Tokyo", "New York", "Berlin", "Cairo", "Sydney", "Toronto", "Madrid", "Oslo",
)
ADJECTIVES = (
    "small", "bright", "quiet", "heavy", "ancient", "strange", "gentle", "broken", "golden", "tiny",
    "enormous", "careful", "curious", "silver", "muddy", "warm", "cold", "clever", "lazy", "famous",
    "purple", "simple", "noisy", "empty", "shiny", "rough", "smooth", "wooden", "brave", "sleepy",
)
VERBS_PAST = (
    "found", "lost", "carried", "painted", "repaired", "opened", "borrowed", "bought", "sold", "cleaned",
    "dropped", "hid", "packed", "wrapped", "described", "forgot", "noticed", "moved", "checked", "built",
)
VERBS_BASE = (
    "read", "write", "cook", "travel", "sing", "swim", "dance", "study", "drive", "paint", "listen",
    "explain", "wait", "climb", "whisper", "remember", "measure", "count", "walk", "answer",
)
ADVERBS = (
    "slowly", "quickly", "carefully", "quietly", "happily", "suddenly", "gently", "loudly", "early",
    "late", "again", "together", "almost", "finally", "rarely", "often", "never", "always",
)
TIMES = (
    "this morning", "last night", "yesterday", "on Monday", "on Friday evening", "after lunch",
    "before dawn", "in the spring", "during the storm", "at noon", "next week", "tomorrow",
    "every Sunday", "in winter", "at midnight", "two days ago",
)
WEATHER = ("sunny", "windy", "rainy", "foggy", "cloudy", "snowy", "stormy", "clear", "humid", "freezing")
COLOURS = ("red", "blue", "green", "yellow", "black", "white", "orange", "grey", "pink", "brown")
JOBS = ("engineer", "painter", "nurse", "baker", "lawyer", "farmer", "musician", "teacher", "sailor", "chef")
SCIENCE = (
    "gravity", "electricity", "photosynthesis", "magnetism", "evolution", "the atmosphere", "volcanoes",
    "the ocean tides", "the solar system", "earthquakes", "rainbows", "the human heart", "bacteria",
)

TEMPLATES = (
    "{name} {verb_past} the {adj} {thing} {time}.",
    "The {adj} {animal} ran {adverb} toward {place}.",
    "Have you seen the {colour} {thing} that {name} {verb_past}?",
    "Why did {name} go to {place} {time}?",
    "I think the {animal} is {adj}, but the {animal2} is {adj2}.",
    "Please bring {count} {food_plural_hint}{food} to {place}.",
    "It was {weather} in {place} {time}.",
    "Where is the {adj} {thing}?",
    "{name} wants to {verb} {adverb}.",
    "Do you like {food}, or do you prefer {food2}?",
    "We bought {count} {thing}s for {price}.",
    "The train leaves at {clock} from {place}.",
    "In {year}, {name} moved to {place}.",
    "{name} is a {job} who likes to {verb}.",
    "Can you {verb} a little more {adverb2}?",
    "There are {count} {animal}s near {place}!",
    "The temperature dropped to {degrees} degrees {time}.",
    "My {thing} is {adj}; yours is {adj2}.",
    "Wow, what a {adj} {animal}!",
    "If it is {weather} {time}, we will stay at {place}.",
    "The {job} explained {science} to the children.",
    "Room {room}, please: the {adj} one on the left.",
    "{name}, {name2} and {name3} walked to {place} together.",
    "Is the {thing} {colour} or {colour2}?",
    "About {percent} percent of the {animal}s were {adj}.",
    "She said, \"The {thing} is {adverb} {adj}.\"",
    "Call me at {clock}, not before.",
    "First the {food}, then the {food2}, and finally the {food3}.",
    "How many {thing}s did {name} {verb_base_buy} {time}?",
    "The {adj} {thing} cost {price}, which seemed {adj2}.",
    "Nobody knew why the {animal} was so {adj}.",
    "Turn left at {place}, then walk {count} blocks.",
    "Who {verb_past} my {thing}?",
    "{name} {adverb} {verb_past} the {thing}.",
    "The score was {small} to {small2} at half time.",
    "Chapter {small}: the {adj} {animal} of {place}.",
    "On {month} {day}, {year}, the {thing} was {verb_past}.",
    "It takes {decimal} hours to reach {place} by train.",
    "Don't forget the {thing}, the {thing2} and the {thing3}.",
    "Are you sure it was {name} and not {name2}?",
)

HAND_WRITTEN = (
    "Hello, and welcome to the speech demo.",
    "The quick brown fox jumps over the lazy dog.",
    "Speculative decoding drafts several tokens and verifies them at once.",
    "How are you today?",
    "Thank you very much for listening.",
    "This voice runs entirely on your own computer.",
    "Good morning! The coffee is ready.",
    "Please close the door when you leave.",
    "What time is it in Tokyo right now?",
    "Two plus two equals four.",
    "The meeting starts at half past nine.",
    "I can't believe it's already December!",
    "She sells sea shells by the sea shore.",
    "Peter Piper picked a peck of pickled peppers.",
    "A journey of a thousand miles begins with a single step.",
    "Could you repeat that, please?",
    "The results were surprising, to say the least.",
    "Yes. No. Maybe. I don't know.",
    "Every morning, the baker opens the shop at six.",
    "The library is closed on public holidays.",
    "Rain is expected later this afternoon.",
    "Our flight was delayed by forty-five minutes.",
    "Is this the way to the train station?",
    "Remember to drink plenty of water.",
    "The children laughed at the clown's silly hat.",
    "My phone number ends in seven, three, one.",
    "We're going to need a bigger boat.",
    "The museum has over 2,000 paintings.",
    "Mathematics is the language of nature.",
    "Let's meet at the corner of Fifth Street and Main.",
    "Turn the volume down, please; the baby is asleep.",
    "Which one do you want: the red one or the blue one?",
    "The experiment failed twice before it finally worked.",
    "Honesty is the best policy.",
    "The price went up by 3.5 percent last year.",
    "Hurry up, or we'll miss the bus!",
    "It's a beautiful day for a walk in the park.",
    "Knowledge speaks, but wisdom listens.",
    "The old lighthouse still shines every night.",
    "Do you speak English?",
)

MONTHS = (
    "January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
    "November", "December",
)


@dataclass(frozen=True)
class CorpusConfig:
    size: int = 5000  # number of sentences (hand-written ones included)
    seed: int = 1234
    free_share: float = 0.6  # share of free word sequences; the rest are templates


# Words a public demo should not say, and tokens that are not words (wordfreq lists web text).
_BLOCKED = frozenset("""
    fuck fucking fucked fucker shit shitty bitch bitches cunt dick dicks cock cocks pussy porn porno
    nigga nigger niggas fag faggot slut whore twat wank wanker bastard asshole ass tits boobs cum rape
    raped rapist nazi nazis penis vagina sex sexy horny dildo
""".split())
_BLOCKED_STEMS = ("fuck", "shit", "nigg", "cunt", "porn", "rapi", "rape", "whor", "slut", "twat", "wank", "bitch",
                  "fag", "dick", "cock", "pussy", "sex", "nazi", "penis", "vagin", "orgas", "nude", "naked", "kill")


@functools.lru_cache(maxsize=4)
def word_list(size: int = 20_000) -> tuple[str, ...]:
    """The `size` most frequent English words that are plain words (letters, an inner apostrophe)."""
    from wordfreq import top_n_list  # training only: the app never needs it

    words = []
    for word in top_n_list("en", size * 2):
        if len(words) == size:
            break
        plain = re.fullmatch(r"[a-z]+(?:'[a-z]+)?", word) and (len(word) > 1 or word in "ai")
        if plain and word not in _BLOCKED and not word.startswith(_BLOCKED_STEMS):
            words.append(word)
    return tuple(words)


def free_sentence(rng: random.Random, words: tuple[str, ...], min_words: int = 3, max_words: int = 18) -> str:
    """Random words with punctuation, a number or a name now and then; capitalised like a sentence."""
    n = rng.randint(min_words, max_words)
    out: list[str] = []
    for i in range(n):
        roll = rng.random()
        if roll < 0.04:
            word = str(rng.choice((rng.randint(0, 20), rng.randint(21, 999), rng.randint(1000, 99999),
                                   rng.randint(1850, 2030))))
        elif roll < 0.08:
            word = rng.choice(NAMES + PLACES)
        else:
            # Half the draws uniform over the list (rare words and their sounds), half from the top 2,000.
            word = rng.choice(words) if rng.random() < 0.5 else rng.choice(words[:2000])
        out.append(word)
        if i < n - 1 and rng.random() < 0.08:
            out[-1] += rng.choice((",", ",", ",", ";", ":", " -"))
    sentence = " ".join(out)
    sentence = sentence[0].upper() + sentence[1:] + rng.choice((".", ".", ".", "?", "!"))
    return sentence


def _fill(template: str, rng: random.Random) -> str:
    def pick(seq):
        return rng.choice(seq)

    names = rng.sample(NAMES, 3)
    values = {
        "name": names[0], "name2": names[1], "name3": names[2],
        "animal": pick(ANIMALS), "animal2": pick(ANIMALS),
        "thing": pick(THINGS), "thing2": pick(THINGS), "thing3": pick(THINGS),
        "food": pick(FOODS), "food2": pick(FOODS), "food3": pick(FOODS), "food_plural_hint": "",
        "place": pick(PLACES), "adj": pick(ADJECTIVES), "adj2": pick(ADJECTIVES),
        "verb_past": pick(VERBS_PAST), "verb": pick(VERBS_BASE), "verb_base_buy": pick(("buy", "find", "sell")),
        "adverb": pick(ADVERBS), "adverb2": pick(("slowly", "quietly", "carefully", "clearly")),
        "time": pick(TIMES), "weather": pick(WEATHER), "colour": pick(COLOURS), "colour2": pick(COLOURS),
        "job": pick(JOBS), "science": pick(SCIENCE),
        "count": str(rng.choice((2, 3, 4, 5, 6, 7, 8, 9, 10, 12, 15, 20, 25, 40, 99, 100, 250, 1000))),
        "small": str(rng.randint(0, 12)), "small2": str(rng.randint(0, 12)),
        "price": rng.choice(("$5", "$12.50", "$99", "$1,200", "20 euros", "£3.75", "$0.99")),
        "clock": rng.choice(("7:15", "8:30", "9 o'clock", "10:45", "noon", "3:20", "6 p.m.", "11:05")),
        "year": str(rng.randint(1850, 2030)), "degrees": str(rng.randint(-20, 40)),
        "room": str(rng.randint(1, 999)), "percent": str(rng.randint(1, 99)),
        "decimal": rng.choice(("1.5", "2.25", "3.5", "0.75", "4.2")),
        "month": pick(MONTHS), "day": str(rng.randint(1, 28)),
    }
    sentence = template.format(**values)
    return sentence[0].upper() + sentence[1:]


def build_corpus(config: CorpusConfig = CorpusConfig()) -> list[str]:
    """`config.size` distinct sentences: the hand-written ones, then generated ones (deterministic)."""
    rng = random.Random(config.seed)
    words = word_list() if config.free_share > 0 else ()
    sentences = list(dict.fromkeys(HAND_WRITTEN))[: config.size]
    seen = set(sentences)
    attempts = 0
    while len(sentences) < config.size:
        attempts += 1
        if attempts > config.size * 50:
            raise ValueError(f"could not generate {config.size} distinct sentences from the templates")
        if rng.random() < config.free_share:
            sentence = free_sentence(rng, words)
        else:
            sentence = _fill(rng.choice(TEMPLATES), rng)
        if sentence not in seen:
            seen.add(sentence)
            sentences.append(sentence)
    return sentences


#: What people say in one to three words: a corpus of sentences holds almost none (26 of the shipped voice's
#: 9,407 training chunks had eight symbols or fewer), and the voice says them less clearly than sentences
#: (docs/benchmarks.md, "Short utterances": 4,000 of them added to its training changed nothing measurable).
SHORT_PHRASES = (
    "Hi!", "Hello.", "Hey!", "Hello!", "Yes.", "No.", "Yes!", "No!", "Yes?", "Okay.", "OK!", "Thanks!",
    "Thank you.", "Thank you!", "Sorry.", "Sorry?", "Wait!", "Stop!", "Go!", "Goodbye.", "Bye!", "Bye-bye.",
    "Good night.", "Good morning!", "Good evening.", "Good luck!", "Sure.", "Right.", "Really?", "Why?", "How?",
    "When?", "Where?", "Who?", "What?", "Help!", "Welcome!", "Cheers!", "Please.", "Please!", "Maybe.",
    "Of course.", "Not yet.", "Me too.", "Hi there!", "See you.", "Well done!", "Excuse me.", "Pardon?",
    "Come in!", "Let's go!", "All right.", "Fine.", "Great!", "Nice!", "Wow!", "Oh no!", "Oops!", "Hmm.",
    "Absolutely.", "Exactly.", "Never.", "Always.", "Done.", "Ready?", "Careful!", "Listen.", "Look!",
    "Happy birthday!", "Congratulations!", "Good job!", "Take care.", "Why not?", "I agree.", "I see.",
)


def short_utterance(rng: random.Random, words: tuple[str, ...]) -> str:
    """One to three words as a whole utterance: a phrase people say, or common words, a name or a number."""
    roll = rng.random()
    if roll < 0.4:
        return rng.choice(SHORT_PHRASES)
    if roll < 0.5:
        name = rng.choice(NAMES + PLACES).split()[-1]
        return name[0].upper() + name[1:] + rng.choice(("!", ".", "?"))
    if roll < 0.55:
        return str(rng.randint(0, 100)) + "."
    picked = [rng.choice(words[:5000]) for _ in range(rng.choice((1, 1, 2, 3)))]
    utterance = " ".join(picked)
    return utterance[0].upper() + utterance[1:] + rng.choice((".", ".", "!", "?"))


def short_corpus(size: int, seed: int = 0) -> list[str]:
    """`size` short utterances (deterministic; the hand-written phrases recur, each rendering of them differs:
    the teacher's durations and noise are sampled)."""
    rng = random.Random(seed)
    words = word_list()
    return [short_utterance(rng, words) for _ in range(size)]


def split_corpus(sentences: list[str], test_size: int, seed: int = 0) -> tuple[list[str], list[str]]:
    """Deterministic train/test split; test sentences are never trained on."""
    if not 0 <= test_size < len(sentences):
        raise InputError(f"test_size must be in [0, {len(sentences)}), got {test_size}")
    order = list(range(len(sentences)))
    random.Random(seed).shuffle(order)
    test_idx = set(order[:test_size])
    train = [s for i, s in enumerate(sentences) if i not in test_idx]
    test = [s for i, s in enumerate(sentences) if i in test_idx]
    return train, test
