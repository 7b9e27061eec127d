"""The `search` tool: a small generated knowledge base of companies and people (chapter 08, ARPO).

ARPO (arXiv 2507.19849) trains search agents on multi-hop questions; this is the course's miniature
of their search engine. The knowledge base is generated deterministically from `KB_SEED`, no
download, from a few short word lists, so every entity is a *combination* of familiar words:

- a company name is two words, a prefix and a suffix (`arvex labs`); a third of the 160 names (53)
  are held by TWO companies in different cities, the others by one: 213 companies, half of them
  sharing their name;
- a company has a city and a `founder` and a `ceo`, each a person of its own (426 people);
- a person's name is a given and a family name (`dov falk`), unique to that person; a person has a
  city for each of `born_in`, `lives_in` and `studied_in`. The two companies sharing a name have
  role holders that differ on every attribute, so taking one for the other always changes the
  answer (the two-hop task's ambiguity relies on it).

Words are reused across entities on purpose: a held-out entity is a new combination of words that
training has shown, never an unseen token (a tiny model cannot emit a token it never trained on).

The argument is `ENTITY RELATION` (the last word is the relation). The result lists every fact that
matches, as `subject relation object` triples joined by ` ; `, a company subject qualified by its city.
A company has two query forms: the imprecise `NAME ROLE` lists every company of that name, and the
precise `NAME in CITY ROLE` only the one in that city (`no result` if no company of that name is
there). Person queries have one form, `PERSON ATTRIBUTE`:

    search arvex works founder
        ->  arvex works in penrith founder dov falk ; arvex works in brenna founder jonas holm
    search arvex works in brenna founder  ->  arvex works in brenna founder jonas holm
    search arvex works in ashby founder   ->  no result
    search dov falk born_in               ->  dov falk born_in farrowby

An unknown entity or relation, or a relation that does not apply to the entity, gives `no result`;
fewer than two words give `error: ...` text. The tool never raises and only reads the table. The
precise form needs no new word: `in` is already the word that qualifies a company by its city (and
no company name contains it).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from course_lib.tools import register

KB_SEED = 8
PREFIXES = (
    "arvex", "bronti", "caldex", "dravon", "elmix", "fenrow", "gorvan", "hexlo",
    "iltra", "jorvu", "kastel", "lumex", "marvo", "nexta", "orvane", "pyxal",
)  # fmt: skip
SUFFIXES = ("labs", "works", "group", "systems", "foods", "motors", "media", "bank", "mining", "energy")
GIVEN_NAMES = (
    "ada", "bram", "cleo", "dov", "esme", "finn", "greta", "hugo", "ines", "jonas", "kaia", "leon",
    "mira", "nils", "olga", "piet", "quin", "rosa", "sven", "tova", "ugo", "vera", "wim", "yara",
)  # fmt: skip
FAMILY_NAMES = (
    "abel", "brandt", "castor", "dahl", "eriks", "falk", "gorm", "holm", "isak", "janek", "koval", "lund",
    "moss", "nyberg", "orlov", "pagel", "quist", "rask", "stahl", "thorn", "ulm", "vidal", "wendt", "zorn",
)  # fmt: skip
CITIES = (
    "ashby", "brenna", "corlis", "dunmere", "elsford", "farrowby", "glenrock", "halvard",
    "ismere", "kelby", "lanmoor", "merrin", "norwick", "oakhaven", "penrith", "quenby",
)  # fmt: skip
ROLES = ("founder", "ceo")
"""Company -> person relations (the first hop)."""
ATTRIBUTES = ("born_in", "lives_in", "studied_in")
"""Person -> city relations (the second hop)."""
SHARED_NAME_SHARE = 1 / 3
"""The share of company names held by two companies: a third, so that half of the companies (and of
the questions) are ambiguous."""
NO_RESULT = "no result"


def company_in_city(entity: str) -> tuple[str, str] | None:
    """`(NAME, CITY)` if `entity` reads `NAME in CITY` (a precise company query), else None."""
    words = entity.split()
    if len(words) >= 3 and words[-2] == "in":
        return " ".join(words[:-2]), words[-1]
    return None


def is_precise(arguments: str) -> bool:
    """Whether `arguments` is a precise company query, `NAME in CITY ROLE` (whether or not it finds one)."""
    words = arguments.split()
    return len(words) >= 4 and words[-1] in ROLES and company_in_city(" ".join(words[:-1])) is not None


@dataclass(frozen=True)
class Company:
    name: str
    """Two words; at most two companies share a name, and then never a city."""
    city: str
    staff: dict[str, str]
    """Role -> the person (two words) who holds it."""


@dataclass(frozen=True)
class KnowledgeBase:
    companies: tuple[Company, ...]
    by_name: dict[str, tuple[Company, ...]]
    """Company name -> its companies, in the order the tool lists them."""
    people: dict[str, dict[str, str]]
    """Person -> attribute -> city."""

    def company(self, name: str, city: str) -> Company | None:
        """The company called `name` in `city`, or None."""
        return next((c for c in self.by_name.get(name, ()) if c.city == city), None)

    def facts(self, entity: str, relation: str) -> list[str]:
        """Every `subject relation object` triple about `entity` and `relation` (empty if none); a company
        `entity` is a name (every company of that name) or `NAME in CITY` (the one in that city)."""
        if relation in ROLES:
            located = company_in_city(entity)
            if located:
                found = self.company(*located)
                companies: tuple[Company, ...] = (found,) if found else ()
            else:
                companies = self.by_name.get(entity, ())
            return [f"{c.name} in {c.city} {relation} {c.staff[relation]}" for c in companies]
        if relation in ATTRIBUTES and entity in self.people:
            return [f"{entity} {relation} {self.people[entity][relation]}"]
        return []


def build_knowledge_base(seed: int = KB_SEED) -> KnowledgeBase:
    """The knowledge base of `seed` (the module docstring describes it); deterministic."""
    rng = random.Random(f"knowledge_base:{seed}")
    names = [f"{prefix} {suffix}" for prefix in PREFIXES for suffix in SUFFIXES]
    shared = set(rng.sample(names, round(SHARED_NAME_SHARE * len(names))))
    needed = len(ROLES) * (len(names) + len(shared))
    # Distinct (given, family) pairs: a person is one entity, though each of its words is reused.
    persons = iter(rng.sample([f"{g} {f}" for g in GIVEN_NAMES for f in FAMILY_NAMES], needed))
    companies: list[Company] = []
    people: dict[str, dict[str, str]] = {}
    for name in names:
        count = 2 if name in shared else 1
        staff = [{role: next(persons) for role in ROLES} for _ in range(count)]
        for role in ROLES:
            for attribute in ATTRIBUTES:
                # Sampled without replacement: the twins' role holders never share an attribute's city.
                for holder, city in zip(staff, rng.sample(CITIES, count)):
                    people.setdefault(holder[role], {})[attribute] = city
        companies += [Company(name, city, holders) for city, holders in zip(rng.sample(CITIES, count), staff)]
    by_name: dict[str, tuple[Company, ...]] = {}
    for company in companies:
        by_name[company.name] = (*by_name.get(company.name, ()), company)
    return KnowledgeBase(tuple(companies), by_name, people)


KB = build_knowledge_base()
"""The course's knowledge base, the one the `search` tool reads."""


def words() -> list[str]:
    """Every word the tool's results can contain (entities, relations and the fixed words)."""
    entities = (*PREFIXES, *SUFFIXES, *GIVEN_NAMES, *FAMILY_NAMES, *CITIES)
    return list(dict.fromkeys([*entities, *ROLES, *ATTRIBUTES, "in", ";", *NO_RESULT.split()]))


def search(arguments: str) -> str:
    """The facts about `ENTITY RELATION`, `ENTITY` a company name (imprecise), `NAME in CITY` (precise) or a
    person (see the module docstring), as text."""
    if not isinstance(arguments, str):
        return "error: arguments must be text"
    parts = arguments.split()
    if len(parts) < 2:
        return "error: search takes an entity and a relation"
    facts = KB.facts(" ".join(parts[:-1]), parts[-1])
    return " ; ".join(facts) if facts else NO_RESULT


register("search", search)
