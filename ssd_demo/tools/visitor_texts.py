"""Held-out text a visitor would type: the evaluation set for intelligibility (PER) and duration.

Written by hand for this purpose and never used in training (a test checks that no sentence is in the
training corpus). Questions, numbers, prices, times, names, lists, subordinate clauses and a few
multi-sentence paragraphs, in four length buckets so that a content drop at any length shows.
"""

from __future__ import annotations

SHORT = (  # 3-8 words
    "Good morning, everyone.",
    "The weather is nice today.",
    "Where did you park the car?",
    "My sister bought a red bicycle last week.",
    "Please turn off the lights.",
    "Is the museum open on Sundays?",
    "Thanks for the lovely dinner!",
    "It costs twelve dollars and fifty cents.",
    "Maria plays the violin beautifully.",
    "Call me after 6 p.m.",
    "We need milk, eggs and flour.",
    "The train was late again.",
)

MEDIUM = (  # 9-15 words
    "When the orchestra finished the final movement, the audience stood up and applauded.",
    "Please call Stella and ask her to bring these things from the store.",
    "Our neighbours from Portugal invited us for a barbecue next Saturday afternoon.",
    "Could you explain why the printer keeps jamming on the second page?",
    "In 1969, two astronauts walked on the surface of the Moon.",
    "If it rains tomorrow, the football match will probably be cancelled.",
    "The doctor said I should drink more water and sleep eight hours.",
    "Hiroshi and Fatima are presenting their research at the conference in Vienna.",
    "The bakery on the corner sells fresh croissants every morning before seven.",
    "Do you remember the name of the hotel where we stayed in Lisbon?",
    "About 40 percent of the students chose biology as their main subject.",
    "She opened the window, looked outside, and saw that it was snowing.",
)

LONG = (  # 16-30 words
    "Although the forecast promised sunshine, a cold wind blew in from the north, and by noon everyone on the "
    "beach had gone home.",
    "The committee will meet on Thursday, March 14, to discuss the budget, the new library building, and the "
    "summer reading programme.",
    "My grandfather, who worked as a carpenter for forty years, still builds small wooden toys for all of his "
    "grandchildren.",
    "Before you leave the laboratory, please make sure that every burner is switched off and that the windows "
    "are closed.",
    "The quarterly report shows that sales increased by 8.5 percent, mostly because of strong demand for the "
    "smaller electric models.",
    "Nobody expected the little village team to win the championship, but they scored twice in the last ten "
    "minutes of the game.",
    "You can reach the old lighthouse by following the coastal path for about three kilometres, then climbing "
    "the stone steps.",
    "When Olivia finally found her keys under the sofa cushion, she laughed and promised herself to buy a bowl "
    "for the hallway.",
    "The engineers replaced the damaged cables overnight, so the trains were running normally again by the time "
    "commuters arrived.",
    "Astronomers believe that the comet, which last passed close to the Earth in 1986, will return in about "
    "seventy-five years.",
)

PARAGRAPHS = (
    "Welcome to the city museum. The exhibition on the ground floor tells the story of the harbour, from the "
    "first fishing boats to the container ships of today. On the second floor you will find paintings by local "
    "artists, including several portraits that have never been shown before. Guided tours start every hour, and "
    "the cafe next to the entrance is open until five o'clock.",
    "Last summer we rented a small cottage near the mountains. Every morning, my brother went out early to "
    "photograph the birds, while I stayed behind with a cup of coffee and a good book. In the afternoons we "
    "walked along the river, and on the last evening a storm knocked out the electricity, so we played cards by "
    "candlelight until midnight.",
    "To make the sauce, melt two tablespoons of butter in a pan over medium heat. Add one chopped onion and cook "
    "it slowly for about ten minutes, stirring now and then. Pour in the tomatoes, season with salt and pepper, "
    "and let everything simmer for twenty minutes. Taste it before serving, and add a little sugar if the sauce "
    "seems too sour.",
    "Speculative decoding lets a small draft model guess several tokens ahead. The large model then checks all of "
    "those guesses in a single pass and keeps the ones it agrees with. When the guesses are good, the speech comes "
    "out faster, and when the tolerance is zero, the result has exactly the same distribution as ordinary "
    "decoding. That is why a listener should not be able to hear any difference.",
)

BUCKETS: dict[str, tuple[str, ...]] = {
    "3-8 words": SHORT,
    "9-15 words": MEDIUM,
    "16-30 words": LONG,
    "paragraphs": PARAGRAPHS,
}


def visitor_texts(per_bucket: int | None = None) -> list[tuple[str, str]]:
    """(bucket, text) pairs, at most `per_bucket` from each bucket (all when None)."""
    return [(bucket, text) for bucket, texts in BUCKETS.items() for text in texts[:per_bucket]]
