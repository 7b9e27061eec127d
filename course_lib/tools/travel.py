"""A miniature TravelPlanner sandbox and its tools (chapter 03, Planner-R1, arXiv 2509.25779).

TravelPlanner's agents plan trips against a fixed database reached only through search tools.
Here the database is one small generated `World` (seed `WORLD_SEED`): `CITIES`, flights and ground
transport (bus or taxi) for every ordered pair of cities, accommodations with a room type, a price
per night and a minimum number of nights, restaurants with a cuisine and a price, and attractions
with a price. Every entity name and every price is one word, so a word-level policy copies
entities from observations token by token.

Six search tools mirror the paper's (the seventh, `calculator`, is registered by
`course_lib.tools`). Arguments are positional words (a structured, typed signature per tool):

    get_cities                                  -> arden belmar corvis ...
    search_flights ORIGIN DESTINATION           -> fl7 4 ; fl8 6
    search_ground_transportation ORIGIN DEST    -> gt7 bus 2 ; gt8 taxi 5
    search_accommodations CITY                  -> ac3 private 4 min 1 ; ...
    search_restaurants CITY                     -> rs5 thai 2 ; ...
    search_attractions CITY                     -> at2 3 ; ...

Bad arguments (an unknown city, a wrong count of words, the same city twice) come back as short
`error: ...` text; the tools never raise.
"""

from __future__ import annotations

import itertools
import random
from dataclasses import dataclass

from course_lib.tools import register

WORLD_SEED = 3
CITIES = ("arden", "belmar", "corvis", "dunmore", "elwick", "faro")
ROOM_TYPES = ("private", "shared", "entire")
CUISINES = ("thai", "pasta", "sushi", "tacos")
GROUND_MODES = ("bus", "taxi")
FLIGHTS_PER_ROUTE = 2
ACCOMMODATIONS_PER_CITY = 3
RESTAURANTS_PER_CITY = 4
ATTRACTIONS_PER_CITY = 2
MAX_MIN_NIGHTS = 2


@dataclass(frozen=True)
class Transport:
    name: str
    mode: str
    """`flight`, `bus` or `taxi`."""
    origin: str
    destination: str
    price: int


@dataclass(frozen=True)
class Accommodation:
    name: str
    city: str
    room: str
    price: int
    """Per night."""
    min_nights: int


@dataclass(frozen=True)
class Restaurant:
    name: str
    city: str
    cuisine: str
    price: int


@dataclass(frozen=True)
class Attraction:
    name: str
    city: str
    price: int


@dataclass(frozen=True)
class World:
    """The whole sandbox: every entity by name."""

    transports: dict[str, Transport]
    accommodations: dict[str, Accommodation]
    restaurants: dict[str, Restaurant]
    attractions: dict[str, Attraction]

    def entity_names(self) -> list[str]:
        return [*self.transports, *self.accommodations, *self.restaurants, *self.attractions]

    def flights(self, origin: str, destination: str) -> list[Transport]:
        return [t for t in self._route(origin, destination) if t.mode == "flight"]

    def ground(self, origin: str, destination: str) -> list[Transport]:
        return [t for t in self._route(origin, destination) if t.mode != "flight"]

    def _route(self, origin: str, destination: str) -> list[Transport]:
        return [t for t in self.transports.values() if (t.origin, t.destination) == (origin, destination)]

    def stays(self, city: str) -> list[Accommodation]:
        return [a for a in self.accommodations.values() if a.city == city]

    def meals(self, city: str) -> list[Restaurant]:
        return [r for r in self.restaurants.values() if r.city == city]

    def sights(self, city: str) -> list[Attraction]:
        return [a for a in self.attractions.values() if a.city == city]


def generate_world(seed: int = WORLD_SEED) -> World:
    """The sandbox for `seed`. Each city offers every room type with a one-night minimum somewhere
    and at least two cuisines, so that every query the environment draws has a feasible plan."""
    rng = random.Random(seed)
    transports: dict[str, Transport] = {}
    for origin, destination in itertools.permutations(CITIES, 2):
        for _ in range(FLIGHTS_PER_ROUTE):
            name = f"fl{len(transports)}"
            transports[name] = Transport(name, "flight", origin, destination, rng.randint(3, 9))
        for mode in GROUND_MODES:
            name = f"gt{len(transports)}"
            low, high = (1, 5) if mode == "bus" else (3, 8)
            transports[name] = Transport(name, mode, origin, destination, rng.randint(low, high))
    accommodations: dict[str, Accommodation] = {}
    restaurants: dict[str, Restaurant] = {}
    attractions: dict[str, Attraction] = {}
    for city in CITIES:
        rooms = list(ROOM_TYPES)
        rng.shuffle(rooms)
        for k in range(ACCOMMODATIONS_PER_CITY):
            name = f"ac{len(accommodations)}"
            min_nights = 1 if k == 0 else rng.randint(1, MAX_MIN_NIGHTS)
            accommodations[name] = Accommodation(name, city, rooms[k % len(rooms)], rng.randint(1, 6), min_nights)
        cuisines = rng.sample(CUISINES, 2) + [rng.choice(CUISINES) for _ in range(RESTAURANTS_PER_CITY - 2)]
        for cuisine in cuisines:
            name = f"rs{len(restaurants)}"
            restaurants[name] = Restaurant(name, city, cuisine, rng.randint(1, 5))
        for _ in range(ATTRACTIONS_PER_CITY):
            name = f"at{len(attractions)}"
            attractions[name] = Attraction(name, city, rng.randint(0, 4))
    return World(transports, accommodations, restaurants, attractions)


WORLD = generate_world()
"""The sandbox every tool and the `mini_travel` environment read."""


def _words(arguments: str, count: int) -> list[str] | str:
    """The argument words, or an error text when their number is not `count` or a city is unknown."""
    if not isinstance(arguments, str):
        return "error: arguments must be text"
    words = arguments.split()
    if len(words) != count:
        return f"error: expected {count} arguments"
    unknown = [w for w in words if w not in CITIES]
    if unknown:
        return "error: unknown city"
    if len(set(words)) != len(words):
        return "error: origin equals destination"
    return words


def _listing(items: list[str]) -> str:
    return " ; ".join(items) if items else "none"


def get_cities(arguments: str = "") -> str:
    if isinstance(arguments, str) and arguments.strip():
        return "error: get_cities takes no arguments"
    return " ".join(CITIES)


def search_flights(arguments: str) -> str:
    words = _words(arguments, 2)
    if isinstance(words, str):
        return words
    return _listing([f"{t.name} {t.price}" for t in WORLD.flights(*words)])


def search_ground_transportation(arguments: str) -> str:
    words = _words(arguments, 2)
    if isinstance(words, str):
        return words
    return _listing([f"{t.name} {t.mode} {t.price}" for t in WORLD.ground(*words)])


def search_accommodations(arguments: str) -> str:
    words = _words(arguments, 1)
    if isinstance(words, str):
        return words
    return _listing([f"{a.name} {a.room} {a.price} min {a.min_nights}" for a in WORLD.stays(words[0])])


def search_restaurants(arguments: str) -> str:
    words = _words(arguments, 1)
    if isinstance(words, str):
        return words
    return _listing([f"{r.name} {r.cuisine} {r.price}" for r in WORLD.meals(words[0])])


def search_attractions(arguments: str) -> str:
    words = _words(arguments, 1)
    if isinstance(words, str):
        return words
    return _listing([f"{a.name} {a.price}" for a in WORLD.sights(words[0])])


SEARCH_TOOLS = {
    "get_cities": get_cities,
    "search_flights": search_flights,
    "search_ground_transportation": search_ground_transportation,
    "search_accommodations": search_accommodations,
    "search_restaurants": search_restaurants,
    "search_attractions": search_attractions,
}
TOOL_NAMES = (*SEARCH_TOOLS, "calculator")
"""Planner-R1's seven tools."""

for _name, _function in SEARCH_TOOLS.items():
    register(_name, _function)
