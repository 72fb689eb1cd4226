"""Generates bench/data/conversations.json, the retrieval-evaluation dataset.

Deterministic (one seed, no network, no model): multi-session chats between
two named people, built from the topics in bench/data/topics.py, with
questions whose answers lie in known turns. Question kinds:

- single_fact: one turn answers it and shares its key words.
- paraphrase: one turn answers it but the question shares no content word
  with it (checked here), so only meaning can find it.
- multi_hop: two turns from different sessions are both needed.
- temporal: "when did X happen" (the answer is the session date), or
  "what did A tell B about her dog on DATE" (the topic comes up in several
  sessions; only the date singles out the turns).
- summary: a request to recap one session ("what did A and B discuss on
  DATE", "recap the conversation about X"); `session_id` names the session,
  whose story turns are the evidence until a session summary exists.

Run: python -m bench.data.make_conversations [--check]
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
from dataclasses import dataclass, field
from datetime import date, timedelta
from pathlib import Path
from typing import Any

from bench.data.topics import (
    ABOUT,
    BRIDGES,
    CLOSING_REPLIES,
    CLOSINGS,
    ECHO_REPLIES,
    GREETINGS,
    PEOPLE,
    SMALL_TALK,
    TAILS,
    TOPICS,
    Topic,
)

SEED = 20261121
OUT = Path(__file__).with_name("conversations.json")

PRONOUNS = {"f": ("she", "her", "her"), "m": ("he", "his", "him")}
N_CONVERSATIONS = 12
TAIL_PROBABILITY = 0.45
QUESTIONS_PER_KIND = {"single_fact": 5, "paraphrase": 4, "multi_hop": 3, "temporal_when": 2}

_STOP_TEXT = (
    "a an the of to in on for and or with at by from about as is are was were be "
    "been being what which who whom whose when where why how did do does done has "
    "have had it its this that these those i me my we our you your he him his she "
    "her they them their there here will would can could should so just up out into "
    "over any some all each every than then s t not no yes very really much many "
)
_STOP = frozenset(_STOP_TEXT.split())


def _stem(token: str) -> str:
    for suffix in ("ing", "ed", "es", "s"):
        if len(token) > len(suffix) + 3 and token.endswith(suffix):
            return token[: -len(suffix)]
    return token


def content_words(text: str, ignore: set[str]) -> set[str]:
    tokens = re.findall(r"[a-z0-9]+", text.lower())
    return {_stem(t) for t in tokens if t not in _STOP and t not in ignore}


def format_date(d: date, style: int) -> str:
    return f"{d.day} {d:%B %Y}" if style == 0 else f"{d:%B} {d.day}, {d.year}"


@dataclass
class Person:
    name: str
    pron: str
    pos: str
    obj: str


@dataclass
class Thread:
    """One topic as told in one conversation: who owns it and where its parts landed."""

    topic: Topic
    owner: Person
    other: Person
    slots: dict[str, str]
    intro_session: int
    update_session: int | None
    parts: dict[str, str] = field(default_factory=dict)  # part -> turn id

    def fill(self, template: str, **extra: str) -> str:
        values = {
            "owner": self.owner.name,
            "other": self.other.name,
            "pron": self.owner.pron,
            "pos": self.owner.pos,
            "obj": self.owner.obj,
            **self.slots,
            **extra,
        }
        return template.format(**values)


@dataclass
class Session:
    index: int
    day: date
    blocks: list[list[tuple[Person, str, Thread | None, str | None]]] = field(default_factory=list)


class ConversationBuilder:
    """Lays threads, echoes and small talk out over sessions, then numbers the turns."""

    def __init__(self, rng: random.Random, conv_id: str, a: Person, b: Person) -> None:
        self.rng, self.conv_id, self.a, self.b = rng, conv_id, a, b

    def build(self) -> tuple[dict[str, Any], list[Thread], list[Session]]:
        rng = self.rng
        n_sessions = rng.randint(4, 6)
        day = date(2023, 1, 2) + timedelta(days=rng.randint(0, 240))
        sessions = []
        for i in range(n_sessions):
            sessions.append(Session(i, day))
            day += timedelta(days=rng.randint(4, 24))
        threads = self._plan_threads(n_sessions)
        for t in threads:
            self._place_thread(t, sessions)
        talk = rng.sample(SMALL_TALK, k=min(len(SMALL_TALK), 2 * n_sessions))
        for s in sessions:
            for _ in range(rng.randint(1, 2)):
                if talk:
                    first, second = talk.pop()
                    x, y = (self.a, self.b) if rng.random() < 0.5 else (self.b, self.a)
                    s.blocks.append([(x, self._chatty(first), None, None), (y, second, None, None)])
        turns_by_session = [self._render(s) for s in sessions]
        convo = {
            "id": self.conv_id,
            "speakers": [self.a.name, self.b.name],
            "sessions": [
                {"id": f"{self.conv_id}-s{s.index + 1}", "date": s.day.isoformat(), "turns": turns}
                for s, turns in zip(sessions, turns_by_session, strict=True)
            ],
        }
        return convo, threads, sessions

    def _plan_threads(self, n_sessions: int) -> list[Thread]:
        rng = self.rng
        # Two new topics a session, one in the last; updates land in a later session.
        counts = [2] * (n_sessions - 1) + [1]
        topics = rng.sample(TOPICS, k=sum(counts))
        threads, k = [], 0
        for si, count in enumerate(counts):
            for _ in range(count):
                topic = topics[k]
                k += 1
                owner, other = (self.a, self.b) if rng.random() < 0.5 else (self.b, self.a)
                update = rng.randint(si + 1, n_sessions - 1) if si < n_sessions - 1 else None
                slots = dict(rng.choice(topic.slots))
                threads.append(Thread(topic, owner, other, slots, si, update))
        return threads

    def _chatty(self, text: str) -> str:
        if self.rng.random() < TAIL_PROBABILITY:
            return f"{text} {self.rng.choice(TAILS)}"
        return text

    def _place_thread(self, t: Thread, sessions: list[Session]) -> None:
        o, x = t.owner, t.other
        tp = t.topic
        chat = self._chatty
        block = [
            (o, chat(t.fill(tp.statement)), t, "statement"),
            (x, chat(t.fill(tp.reaction)), t, None),
            (o, chat(t.fill(tp.detail)), t, "detail"),
        ]
        if self.rng.random() < 0.5:
            block += [(x, t.fill(tp.followup_q), t, None), (o, t.fill(tp.followup_a), t, None)]
        sessions[t.intro_session].blocks.append(block)
        if t.update_session is not None:
            sessions[t.update_session].blocks.append(
                [
                    (o, chat(t.fill(tp.update)), t, "update"),
                    (x, chat(t.fill(tp.update_reaction)), t, None),
                ]
            )
        # Echoes go where the thread's facts are not, so they compete with them.
        elsewhere = [
            s for s in sessions if s.index not in (t.intro_session, t.update_session)
        ] or sessions
        n_echoes = 2 if self.rng.random() < 0.4 else 1
        for who, text in self.rng.sample(tp.echoes, k=n_echoes):
            speaker, listener = (o, x) if who == "owner" else (x, o)
            reply = self.rng.choice(ECHO_REPLIES)
            self.rng.choice(elsewhere).blocks.append(
                [(speaker, chat(t.fill(text)), None, None), (listener, reply, None, None)]
            )

    def _render(self, s: Session) -> list[dict[str, str]]:
        rng = self.rng
        first, second = (self.a, self.b) if s.index % 2 == 0 else (self.b, self.a)
        greeting, replies = rng.choice(GREETINGS)
        lines: list[tuple[Person, str, Thread | None, str | None]] = [
            (first, greeting.format(other=second.name), None, None),
            (second, rng.choice(replies).format(speaker=first.name), None, None),
        ]
        pending = s.blocks[:]
        rng.shuffle(pending)
        while pending:
            # Prefer a block that starts with the other speaker, so turns alternate
            # and bridge lines ("Anyway, what else is new?") stay rare.
            i = next((k for k, b in enumerate(pending) if b[0][0] is not lines[-1][0]), 0)
            block = pending.pop(i)
            if block[0][0] is lines[-1][0]:
                lines.append((self._partner(block[0][0]), rng.choice(BRIDGES), None, None))
            lines.extend(block)
        closer = self._partner(lines[-1][0])
        lines.append((closer, rng.choice(CLOSINGS), None, None))
        lines.append(
            (
                self._partner(closer),
                rng.choice(CLOSING_REPLIES).format(other=closer.name),
                None,
                None,
            )
        )
        turns = []
        for n, (speaker, text, thread, part) in enumerate(lines, 1):
            turn_id = f"{self.conv_id}-s{s.index + 1}-t{n:02d}"
            if thread is not None and part is not None:
                thread.parts[part] = turn_id
            turns.append({"id": turn_id, "speaker": speaker.name, "text": text})
        return turns

    def _partner(self, p: Person) -> Person:
        return self.b if p is self.a else self.a


class QuestionWriter:
    """Writes one conversation's questions from its threads and sessions."""

    def __init__(
        self,
        rng: random.Random,
        conv: dict[str, Any],
        threads: list[Thread],
        sessions: list[Session],
    ) -> None:
        self.rng, self.conv, self.threads, self.sessions = rng, conv, threads, sessions
        self.texts = {t["id"]: t["text"] for s in conv["sessions"] for t in s["turns"]}
        self.names = {p.lower() for p in conv["speakers"]}

    def write(self) -> list[dict[str, Any]]:
        rng, out = self.rng, []
        for kind, count in QUESTIONS_PER_KIND.items():
            usable = [t for t in self.threads if self._usable(t, kind)]
            for t in rng.sample(usable, k=min(count, len(usable))):
                out.append(self._from_template(t, kind))
        out.extend(self._said_on_date())
        out.extend(self._session_recaps())
        return out

    def _template(self, t: Thread, kind: str) -> tuple[str, tuple[str, ...], str]:
        topic = t.topic
        return {
            "single_fact": topic.single,
            "paraphrase": topic.paraphrase,
            "multi_hop": topic.multi_hop,
            "temporal_when": topic.temporal,
        }[kind]

    def _usable(self, t: Thread, kind: str) -> bool:
        text, parts, _ = self._template(t, kind)
        if not all(p in t.parts for p in parts):
            return False
        # A chatty tail may have added a word the question uses; such a thread
        # cannot carry a paraphrase question.
        return kind != "paraphrase" or not self._shared_words(t.fill(text), parts, t)

    def _shared_words(self, question: str, parts: tuple[str, ...], t: Thread) -> set[str]:
        asked = content_words(question, self.names)
        shared: set[str] = set()
        for p in parts:
            shared |= asked & content_words(self.texts[t.parts[p]], self.names)
        return shared

    def _day(self, t: Thread, part: str) -> date:
        session = int(t.parts[part].split("-s")[1].split("-")[0]) - 1
        return self.sessions[session].day

    def _from_template(self, t: Thread, kind: str) -> dict[str, Any]:
        text, parts, answer = self._template(t, kind)
        dates = {
            f"{p}_date": format_date(self._day(t, p), 0)
            for p in ("statement", "update")
            if p in t.parts
        }
        return {
            "kind": "temporal" if kind == "temporal_when" else kind,
            "text": t.fill(text),
            "evidence_turn_ids": [t.parts[p] for p in parts],
            "answer": t.fill(answer, **dates),
            "topic": t.topic.key,
        }

    def _said_on_date(self) -> list[dict[str, Any]]:
        """'What did A tell B about her dog on DATE': the date picks the session."""
        candidates = [
            (t, parts)
            for t in self.threads
            if t.update_session is not None and "update" in t.parts
            for parts in (("statement", "detail"), ("update",))
        ]
        out = []
        for t, parts in self.rng.sample(candidates, k=min(2, len(candidates))):
            day = self._day(t, parts[0])
            when = format_date(day, self.rng.randint(0, 1))
            about = t.fill(ABOUT[t.topic.key])
            text = f"What did {t.owner.name} tell {t.other.name} about {about} on {when}?"
            out.append(
                {
                    "kind": "temporal",
                    "text": text,
                    "evidence_turn_ids": [t.parts[p] for p in parts],
                    "answer": "; ".join(t.fill(getattr(t.topic, p)) for p in parts),
                    "session_id": t.parts[parts[0]].rsplit("-", 1)[0],
                    "topic": t.topic.key,
                }
            )
        return out

    def _session_recaps(self) -> list[dict[str, Any]]:
        a, b = self.conv["speakers"]
        out = []
        for s in self.sessions:
            story = [
                tid
                for t in self.threads
                for part, tid in t.parts.items()
                if tid.startswith(f"{self.conv['id']}-s{s.index + 1}-")
            ]
            intro = [t for t in self.threads if t.intro_session == s.index]
            when = format_date(s.day, self.rng.randint(0, 1))
            about = intro[0].fill(intro[0].topic.title) if intro else None
            forms = [
                f"What did {a} and {b} discuss on {when}?",
                f"Summarize what {a} and {b} talked about on {when}.",
                f"Can you give me a quick recap of the chat {a} and {b} had on {when}?",
            ]
            if about:
                forms += [
                    f"Recap the conversation {a} and {b} had about {about}.",
                    f"Give me an overview of {a} and {b}'s chat about {about}.",
                ]
            out.append(
                {
                    "kind": "summary",
                    "text": self.rng.choice(forms),
                    "evidence_turn_ids": sorted(story),
                    "answer": None,
                    "session_id": f"{self.conv['id']}-s{s.index + 1}",
                    "topic": None,
                }
            )
        return out


def _check_paraphrase_templates() -> None:
    """Every paraphrase template, with every slot option, avoids its evidence's words."""
    owner = Person("Alex", "she", "her", "her")
    other = Person("Sam", "he", "his", "him")
    for topic in TOPICS:
        text, parts, _ = topic.paraphrase
        for slots in topic.slots:
            t = Thread(topic, owner, other, dict(slots), 0, None)
            asked = content_words(t.fill(text), {"alex", "sam"})
            for part in parts:
                shared = asked & content_words(t.fill(getattr(topic, part)), {"alex", "sam"})
                if shared:
                    raise ValueError(f"{topic.key}: paraphrase shares {shared} with its {part}")


def _check_names(people: list[Person]) -> None:
    slot_words = {
        w
        for topic in TOPICS
        for slots in topic.slots
        for v in slots.values()
        for w in re.findall(r"[A-Za-z]+", v)
    }
    clash = {p.name for p in people} & slot_words
    if clash:
        raise ValueError(f"speaker names also used inside topics: {clash}")


def generate(seed: int = SEED) -> dict[str, Any]:
    rng = random.Random(seed)
    people = [Person(n, *PRONOUNS[g]) for n, g in PEOPLE]
    _check_names(people)
    _check_paraphrase_templates()
    rng.shuffle(people)
    conversations, questions = [], []
    for c in range(N_CONVERSATIONS):
        a, b = people[2 * c], people[2 * c + 1]
        conv_id = f"c{c + 1:02d}"
        convo, threads, sessions = ConversationBuilder(rng, conv_id, a, b).build()
        conversations.append(convo)
        for n, q in enumerate(QuestionWriter(rng, convo, threads, sessions).write(), 1):
            questions.append({"id": f"{conv_id}-q{n:02d}", "conversation_id": conv_id, **q})
    return {
        "description": (
            "Generated by bench/data/make_conversations.py (seed "
            f"{seed}); every turn is one memory. Do not edit by hand."
        ),
        "conversations": conversations,
        "questions": questions,
    }


def render(dataset: dict[str, Any]) -> str:
    return json.dumps(dataset, indent=1, ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument(
        "--check",
        action="store_true",
        help="fail if the committed file differs from a fresh generation",
    )
    args = parser.parse_args(argv)
    text = render(generate())
    if args.check:
        same = args.out.exists() and args.out.read_text(encoding="utf-8") == text
        print("up to date" if same else f"{args.out} is stale: regenerate it")
        return 0 if same else 1
    args.out.write_text(text, encoding="utf-8")
    data = json.loads(text)
    kinds: dict[str, int] = {}
    for q in data["questions"]:
        kinds[q["kind"]] = kinds.get(q["kind"], 0) + 1
    n_turns = sum(len(s["turns"]) for c in data["conversations"] for s in c["sessions"])
    print(
        f"wrote {args.out}: {len(data['conversations'])} conversations, {n_turns} turns, "
        f"{len(data['questions'])} questions {kinds}, {len(text) / 1e6:.2f} MB"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
