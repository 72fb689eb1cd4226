"""The story material of the generated conversations: life-event topics and small talk.

A topic is one thread of news one speaker (the owner) tells the other: a
statement and a detail in one session, an update in a later one, and echo
turns elsewhere that reuse its vocabulary without its facts, so lexical
retrieval meets realistic distractors. Each topic carries its questions, each
naming the parts of the thread (statement, detail, update) that answer it.

Placeholders: {owner} {other} (names), {pron} {pos} {obj} (the owner's
she/her/her or he/his/him), {statement_date} {update_date} (in answers), and
the topic's own slots. Paraphrase questions deliberately share no content word
with their evidence; make_conversations.py checks that.
"""

from __future__ import annotations

from dataclasses import dataclass

# A question template: (text, evidence parts, answer).
QuestionTemplate = tuple[str, tuple[str, ...], str]


@dataclass(frozen=True)
class Topic:
    key: str
    title: str
    slots: tuple[dict[str, str], ...]
    statement: str
    detail: str
    reaction: str
    followup_q: str
    followup_a: str
    update: str
    update_reaction: str
    # (who says it: "owner" or "other", text)
    echoes: tuple[tuple[str, str], ...]
    single: QuestionTemplate
    paraphrase: QuestionTemplate
    temporal: QuestionTemplate
    multi_hop: QuestionTemplate


TOPICS: tuple[Topic, ...] = (
    Topic(
        key="dog",
        title="{owner}'s new {breed}",
        slots=(
            {"breed": "beagle", "pet_name": "Biscuit", "shelter": "Eastside", "age": "two"},
            {
                "breed": "border collie",
                "pet_name": "Juno",
                "shelter": "Maple Street",
                "age": "four",
            },
            {"breed": "greyhound", "pet_name": "Pepper", "shelter": "Hillcrest", "age": "six"},
            {"breed": "corgi", "pet_name": "Waffles", "shelter": "Northgate", "age": "three"},
        ),
        statement=(
            "Big update: I adopted a {breed} from the {shelter} shelter last weekend. "
            "Her name is {pet_name}."
        ),
        detail="{pet_name} is {age} years old and already sleeps at the foot of my bed.",
        reaction="Aww, congratulations! You have to send me pictures of {pet_name}.",
        followup_q="How is she settling in so far?",
        followup_a="Pretty well, though she still hides under the couch when the doorbell rings.",
        update=(
            "{pet_name} graduated from obedience school today! "
            "She can finally sit and stay on command."
        ),
        update_reaction="Ha, a little graduate! Give {pet_name} a treat from me.",
        echoes=(
            ("other", "My neighbor's dog barked all night again, I barely slept."),
            ("other", "Do you think a {breed} would be too much for a tiny apartment?"),
            ("owner", "I walked past the {shelter} shelter today and there was a line outside."),
        ),
        single=(
            "What is the name of the {breed} that {owner} adopted?",
            ("statement",),
            "{pet_name}",
        ),
        paraphrase=(
            "What did {owner} call the animal {pron} brought home from the rescue?",
            ("statement",),
            "{pet_name}",
        ),
        temporal=(
            "When did {owner}'s dog {pet_name} graduate from obedience school?",
            ("update",),
            "{update_date}",
        ),
        multi_hop=(
            "What can the {breed} {owner} got from the {shelter} shelter do now?",
            ("statement", "update"),
            "sit and stay on command",
        ),
    ),
    Topic(
        key="job",
        title="{owner}'s new job at {company}",
        slots=(
            {
                "company": "Northwind Labs",
                "role": "data analyst",
                "district": "the harbor district",
                "project": "customer churn",
            },
            {
                "company": "Copperleaf Games",
                "role": "UX designer",
                "district": "Old Town",
                "project": "mobile onboarding",
            },
            {
                "company": "Harbor Health",
                "role": "project manager",
                "district": "Midtown",
                "project": "clinic scheduling",
            },
            {
                "company": "Brightline Logistics",
                "role": "software engineer",
                "district": "the riverside area",
                "project": "route planning",
            },
        ),
        statement=(
            "I accepted an offer from {company}! I'll be working there as a {role} "
            "starting next month."
        ),
        detail="Best part: their office is in {district}, so my commute drops to fifteen minutes.",
        reaction="That's amazing, congratulations! You've wanted a change for ages.",
        followup_q="Did they match the salary you asked for?",
        followup_a="Almost, and they threw in four extra vacation days, so I'm not complaining.",
        update=(
            "Only three months in at {company} and they already put me in charge of "
            "the {project} project."
        ),
        update_reaction="Look at you, moving up fast!",
        echoes=(
            ("other", "My company announced another reorg today, maybe I should look for offers."),
            ("owner", "The onboarding paperwork never ends, I've signed about forty forms."),
            ("other", "Traffic into {district} was a nightmare this morning."),
        ),
        single=("Which company did {owner} accept an offer from?", ("statement",), "{company}"),
        paraphrase=(
            "Who is going to employ {owner}, and in what position?",
            ("statement",),
            "{company}, as a {role}",
        ),
        temporal=(
            "When did {owner} say {pron} was put in charge of the {project} project?",
            ("update",),
            "{update_date}",
        ),
        multi_hop=(
            "Which project does {owner} lead at the employer with an office in {district}?",
            ("detail", "update"),
            "{project}",
        ),
    ),
    Topic(
        key="move",
        title="{owner}'s move to {city}",
        slots=(
            {
                "city": "Lisbon",
                "partner": "Daniel",
                "neighborhood": "Alfama",
                "lost": "a box with all our kitchen stuff",
            },
            {
                "city": "Denver",
                "partner": "Chris",
                "neighborhood": "Capitol Hill",
                "lost": "the box with our winter coats",
            },
            {
                "city": "Toronto",
                "partner": "Jordan",
                "neighborhood": "Leslieville",
                "lost": "a box of old photo albums",
            },
            {
                "city": "Edinburgh",
                "partner": "Robin",
                "neighborhood": "Leith",
                "lost": "every screw for the bed frame",
            },
        ),
        statement="We're moving to {city} in the spring, {partner} got transferred there.",
        detail="We signed a lease on a two-bedroom flat in {neighborhood}, right next to a park.",
        reaction="Wow, {city}! That's a big change. Are you excited?",
        followup_q="How do you feel about leaving?",
        followup_a="Nervous, mostly. But I've always wanted to live somewhere different.",
        update="The movers lost {lost} on the way to {city}, can you believe it?",
        update_reaction="Oh no, that's the worst. Did they at least offer to pay for it?",
        echoes=(
            ("other", "My cousin lived in {city} for a year and complained about the rent."),
            ("owner", "Packing boxes are so expensive now, who knew cardboard cost that much."),
            ("other", "They opened a park across from my building, it's lovely in the mornings."),
        ),
        single=("Which city is {owner} moving to?", ("statement",), "{city}"),
        paraphrase=(
            "Where will {owner} be relocating, and why?",
            ("statement",),
            "{city}, because {partner} was transferred",
        ),
        temporal=(
            "When did {owner} sign a lease in {neighborhood}?",
            ("detail",),
            "{statement_date}",
        ),
        multi_hop=(
            "What went missing during the move to the city where {partner} was transferred?",
            ("statement", "update"),
            "{lost}",
        ),
    ),
    Topic(
        key="race",
        title="{owner}'s {race} training",
        slots=(
            {"race": "Chicago half marathon", "month": "October", "time": "1:52"},
            {"race": "Berlin 10K", "month": "September", "time": "48 minutes"},
            {"race": "Portland trail race", "month": "June", "time": "2 hours and 10 minutes"},
            {"race": "Brooklyn half marathon", "month": "May", "time": "1:58"},
        ),
        statement="I signed up for the {race} in {month}. Training starts this week!",
        detail="My plan is four runs a week, with a long run every Sunday morning.",
        reaction="You're brave. I get winded running for the bus.",
        followup_q="Are you following an app or a coach?",
        followup_a="An app for now, it yells at me when I go too fast.",
        update="I finished the {race} in {time}! My legs are still sore.",
        update_reaction="That's a great time! Did you celebrate?",
        echoes=(
            ("other", "I tried running once and my knees hated every minute."),
            ("other", "There's a charity 5K near my place next weekend if you want to join."),
            ("owner", "Bought new running shoes and they already gave me a blister."),
        ),
        single=("Which race did {owner} sign up for?", ("statement",), "{race}"),
        paraphrase=("What competition is {owner} preparing for?", ("statement",), "{race}"),
        temporal=("When did {owner} complete the {race}?", ("update",), "{update_date}"),
        multi_hop=(
            "What was {owner}'s time in the race {pron} trained for with long Sunday runs?",
            ("detail", "update"),
            "{time}",
        ),
    ),
    Topic(
        key="craft",
        title="{owner}'s {hobby} class",
        slots=(
            {
                "hobby": "pottery",
                "teacher": "Ines",
                "t_pron": "she",
                "teacher_past": "run a ceramics studio in Porto",
                "item": "bowl",
            },
            {
                "hobby": "woodworking",
                "teacher": "Walt",
                "t_pron": "he",
                "teacher_past": "build boats for a living",
                "item": "cutting board",
            },
            {
                "hobby": "watercolor",
                "teacher": "Mei",
                "t_pron": "she",
                "teacher_past": "illustrate children's books",
                "item": "landscape",
            },
            {
                "hobby": "stained glass",
                "teacher": "Rosa",
                "t_pron": "she",
                "teacher_past": "restore church windows",
                "item": "sun catcher",
            },
        ),
        statement="I started a {hobby} class on Thursday evenings at the community center.",
        detail="The instructor, {teacher}, used to {teacher_past}, so {t_pron}'s very picky.",
        reaction="That sounds so relaxing. I need a hobby that doesn't involve a screen.",
        followup_q="Is it hard?",
        followup_a="Harder than it looks, everything I make comes out crooked.",
        update="I finally made my first {item} in {hobby} class, it's lopsided but I love it.",
        update_reaction="Lopsided is charming! I want to see it.",
        echoes=(
            ("other", "The community center near me is closing for renovations."),
            ("other", "I always wanted to try {hobby} but never found the time."),
            ("owner", "Thursday evenings are the only thing getting me through the week."),
        ),
        single=("What class did {owner} start on Thursday evenings?", ("statement",), "{hobby}"),
        paraphrase=(
            "Which creative course does {owner} attend each week?",
            ("statement",),
            "{hobby}",
        ),
        temporal=("When did {owner} make {pos} first {item}?", ("update",), "{update_date}"),
        multi_hop=(
            "What did {owner} make in the class taught by {teacher}?",
            ("detail", "update"),
            "a {item}",
        ),
    ),
    Topic(
        key="car",
        title="{owner}'s new car",
        slots=(
            {
                "car": "a used blue Honda Fit",
                "car_short": "Honda",
                "price": "$9,000",
                "repair": "$800",
            },
            {
                "car": "a red Mazda 3 with only 20,000 miles",
                "car_short": "Mazda",
                "price": "$14,500",
                "repair": "$650",
            },
            {
                "car": "a silver Toyota Prius",
                "car_short": "Prius",
                "price": "$11,200",
                "repair": "$1,100",
            },
            {
                "car": "a green Subaru Outback",
                "car_short": "Subaru",
                "price": "$16,000",
                "repair": "$900",
            },
        ),
        statement="I finally bought a car! It's {car}, and I paid {price} for it.",
        detail="The dealer tried to sell me an extended warranty but I said no thanks.",
        reaction="No more waiting for the bus in the rain!",
        followup_q="Did you name it yet?",
        followup_a="Not yet, I'm open to suggestions.",
        update=(
            "Someone dented my {car_short} in the grocery store parking lot. "
            "The repair quote is {repair}."
        ),
        update_reaction="Ugh, people are the worst. Did they leave a note?",
        echoes=(
            ("other", "Gas prices are ridiculous this month."),
            ("owner", "Parallel parking is still my nemesis."),
            ("other", "My bike got a flat tire again, I'm thinking about buying a car too."),
        ),
        single=("How much did {owner} pay for the car?", ("statement",), "{price}"),
        paraphrase=(
            "What vehicle did {owner} purchase, and how much did it cost?",
            ("statement",),
            "{car}, {price}",
        ),
        temporal=(
            "When did {owner} get a repair quote for the dent?",
            ("update",),
            "{update_date}",
        ),
        multi_hop=(
            "How much will it cost to fix the car {owner} bought for {price}?",
            ("statement", "update"),
            "{repair}",
        ),
    ),
    Topic(
        key="trip",
        title="{owner}'s trip to {dest}",
        slots=(
            {
                "dest": "Kyoto",
                "trip_month": "April",
                "companion": "my sister Ana",
                "companion_name": "Ana",
                "activity": "see every temple in the city",
                "highlight": "a tea ceremony in a tiny garden",
            },
            {
                "dest": "Iceland",
                "trip_month": "March",
                "companion": "my friend Leo",
                "companion_name": "Leo",
                "activity": "chase the northern lights",
                "highlight": "swimming in a hot spring while it snowed",
            },
            {
                "dest": "Patagonia",
                "trip_month": "November",
                "companion": "my cousin Bea",
                "companion_name": "Bea",
                "activity": "hike out to the glaciers",
                "highlight": "watching a glacier calve into the lake",
            },
            {
                "dest": "Morocco",
                "trip_month": "October",
                "companion": "my friend Theo",
                "companion_name": "Theo",
                "activity": "spend a night in the desert",
                "highlight": "sleeping under the stars near the dunes",
            },
        ),
        statement="We just booked flights to {dest} for {trip_month}!",
        detail=(
            "I'm going with {companion}. {companion_name} wants to {activity}, "
            "I mostly want to eat everything."
        ),
        reaction="Jealous! {dest} has been on my list forever.",
        followup_q="How long are you staying?",
        followup_a="Ten days, which already feels too short.",
        update="Back from {dest}! The highlight was {highlight}.",
        update_reaction="That sounds magical. Post-vacation blues yet?",
        echoes=(
            ("other", "Airport security lines were insane the last time I flew."),
            ("owner", "I need to renew my passport before it expires, remind me."),
            ("other", "I need a vacation so badly, even a weekend away would do."),
        ),
        single=("Where did {owner} book flights to?", ("statement",), "{dest}"),
        paraphrase=("Which holiday spot is {owner} planning to visit?", ("statement",), "{dest}"),
        temporal=("When did {owner} get back from {dest}?", ("update",), "{update_date}"),
        multi_hop=(
            "What was the highlight of the trip {owner} took with {companion_name}?",
            ("detail", "update"),
            "{highlight}",
        ),
    ),
    Topic(
        key="book",
        title="{owner}'s book club",
        slots=(
            {"book": "The Lighthouse Keeper", "author": "Elena Varga", "cafe": "Juniper Cafe"},
            {"book": "Salt and Ember", "author": "Marcus Hale", "cafe": "the Copper Kettle"},
            {"book": "A Year of Small Rooms", "author": "Yuki Tanaka", "cafe": "Bean There"},
            {"book": "The Glass Orchard", "author": "Priyanka Rao", "cafe": "Little Owl Books"},
        ),
        statement="I'm reading {book} by {author} for my book club and I can't put it down.",
        detail="Our book club meets at {cafe} on the first Monday of every month.",
        reaction="Ooh, I've heard good things about {author}.",
        followup_q="Is it sad? Everyone says it's sad.",
        followup_a="So far it's more strange than sad, but I'm only halfway.",
        update="Finished {book} last night. The ending made me cry on the train this morning.",
        update_reaction="I told you! Was it worth it?",
        echoes=(
            ("other", "I haven't read a book in months, my phone ate my attention span."),
            ("other", "Is {cafe} the place with the great cinnamon rolls?"),
            ("owner", "Our library finally extended its opening hours on weekends."),
        ),
        single=("What book is {owner} reading for book club?", ("statement",), "{book}"),
        paraphrase=("Which novel did {owner}'s literary circle choose?", ("statement",), "{book}"),
        temporal=("When did {owner} finish {book}?", ("update",), "the night before {update_date}"),
        multi_hop=(
            "How did {owner} react to the ending of the novel picked by the group that meets "
            "at {cafe}?",
            ("detail", "update"),
            "it made {obj} cry on the train",
        ),
    ),
    Topic(
        key="injury",
        title="{owner}'s sprained {part}",
        slots=(
            {"part": "ankle", "sport": "basketball", "aid": "on crutches"},
            {"part": "knee", "sport": "soccer", "aid": "wearing a brace"},
            {"part": "wrist", "sport": "volleyball", "aid": "in a splint"},
            {"part": "shoulder", "sport": "tennis", "aid": "in a sling"},
        ),
        statement="I sprained my {part} playing {sport} on Saturday, so I'm {aid} for a while.",
        detail="The doctor said six weeks of physical therapy, twice a week.",
        reaction="Ouch! I'm so sorry. Do you need anything?",
        followup_q="Does it hurt a lot?",
        followup_a="Only when I forget and try to use it, which is constantly.",
        update="Physical therapy is done and my {part} feels almost normal again.",
        update_reaction="Finally! Just take it easy for a while.",
        echoes=(
            ("other", "My back has been killing me from sitting all day."),
            ("other", "Did you ever go back to {sport} after college?"),
            ("owner", "The waiting room at the clinic had magazines from 2019."),
        ),
        single=("How did {owner} sprain {pos} {part}?", ("statement",), "playing {sport}"),
        paraphrase=(
            "What kind of harm did {owner} suffer over the weekend?",
            ("statement",),
            "a sprained {part}",
        ),
        temporal=(
            "When did {owner} hurt {pos} {part}?",
            ("statement",),
            "the Saturday before {statement_date}",
        ),
        multi_hop=(
            "Has the {part} {owner} hurt playing {sport} recovered after therapy?",
            ("statement", "update"),
            "yes, it feels almost normal",
        ),
    ),
    Topic(
        key="renovation",
        title="{owner}'s {room} renovation",
        slots=(
            {"room": "kitchen", "contractor": "Dave", "color": "sage green"},
            {"room": "bathroom", "contractor": "Marta", "color": "navy blue"},
            {"room": "laundry room", "contractor": "Gus", "color": "terracotta"},
            {"room": "kitchen", "contractor": "Hiro", "color": "charcoal"},
        ),
        statement=(
            "We're finally redoing the {room}. Our contractor, {contractor}, starts demolition "
            "on Monday."
        ),
        detail="I picked {color} tiles for the {room} floor after staring at samples for weeks.",
        reaction="Exciting! Living through construction is rough though.",
        followup_q="Are you staying somewhere else during the work?",
        followup_a="No, we'll camp in the living room and eat takeout.",
        update="The {room} is done! {contractor} finished two weeks late, but it looks great.",
        update_reaction="Two weeks late is basically on time for contractors.",
        echoes=(
            ("other", "Our landlord still refuses to fix the leaky faucet."),
            ("other", "Home improvement shows make everything look so easy."),
            ("owner", "There is dust in places I didn't know existed."),
        ),
        single=("Which room is {owner} redoing?", ("statement",), "the {room}"),
        paraphrase=(
            "What part of {owner}'s home is being remodeled?",
            ("statement",),
            "the {room}",
        ),
        temporal=("When was the {room} renovation finished?", ("update",), "{update_date}"),
        multi_hop=(
            "How late was the contractor on the room where {owner} chose {color} tiles?",
            ("detail", "update"),
            "two weeks",
        ),
    ),
    Topic(
        key="concert",
        title="{owner}'s {band} concert",
        slots=(
            {
                "band": "The Paper Kites",
                "venue": "the Fillmore",
                "friend": "Zoe",
                "f_pron": "she",
                "song": "Bloom",
            },
            {
                "band": "Fleet Foxes",
                "venue": "Red Rocks",
                "friend": "Nina",
                "f_pron": "she",
                "song": "Helplessness Blues",
            },
            {
                "band": "Khruangbin",
                "venue": "the Greek Theatre",
                "friend": "Marcus",
                "f_pron": "he",
                "song": "Time (You and I)",
            },
            {
                "band": "Bon Iver",
                "venue": "the Roundhouse",
                "friend": "Elise",
                "f_pron": "she",
                "song": "Holocene",
            },
        ),
        statement="I got tickets to see {band} at {venue} next month!",
        detail="{friend} is coming with me, {f_pron}'s been a fan since high school.",
        reaction="No way, I love them! Lucky you.",
        followup_q="Were the tickets expensive?",
        followup_a="Don't ask. The fees alone were half the price.",
        update="The {band} show was incredible, they played {song} as the encore.",
        update_reaction="Goosebumps just hearing about it.",
        echoes=(
            ("other", "Ticket fees are a total scam these days."),
            ("other", "I went to {venue} once for a comedy show."),
            ("owner", "I've had the same song stuck in my head for three days."),
        ),
        single=("Which band is {owner} going to see?", ("statement",), "{band}"),
        paraphrase=(
            "Which musical group's performance will {owner} attend?",
            ("statement",),
            "{band}",
        ),
        temporal=("When did {owner} see {band} live?", ("update",), "{update_date}"),
        multi_hop=(
            "Which song closed the show {owner} went to with {friend}?",
            ("detail", "update"),
            "{song}",
        ),
    ),
    Topic(
        key="language",
        title="{owner}'s {language} lessons",
        slots=(
            {"language": "Portuguese", "tutor": "Beatriz", "country": "Brazil", "level": "B1"},
            {"language": "Japanese", "tutor": "Kenji", "country": "Japan", "level": "N4"},
            {"language": "Italian", "tutor": "Paolo", "country": "Italy", "level": "A2"},
            {"language": "Korean", "tutor": "Minji", "country": "Korea", "level": "TOPIK 2"},
        ),
        statement=(
            "I've started learning {language} with a tutor named {tutor}, two lessons a week."
        ),
        detail="The goal is to chat properly with my partner's family when we visit {country}.",
        reaction="That's so cool. I only know how to order coffee in other languages.",
        followup_q="Is the grammar awful?",
        followup_a="The verbs are destroying me, honestly.",
        update="I passed the {level} {language} exam today!",
        update_reaction="Amazing, all those lessons paid off!",
        echoes=(
            ("other", "Duolingo keeps guilt-tripping me with notifications."),
            ("other", "I took {language} in school and remember absolutely nothing."),
            ("owner", "I put sticky notes on everything in my kitchen to practice vocabulary."),
        ),
        single=("What language is {owner} learning?", ("statement",), "{language}"),
        paraphrase=(
            "Which tongue is {owner} studying, and who teaches {obj}?",
            ("statement",),
            "{language}, with {tutor}",
        ),
        temporal=("When did {owner} pass the {language} exam?", ("update",), "{update_date}"),
        multi_hop=(
            "Which exam did {owner} pass in the language {pron} studies with {tutor}?",
            ("statement", "update"),
            "{level}",
        ),
    ),
    Topic(
        key="garden",
        title="{owner}'s vegetable garden",
        slots=(
            {
                "veg": "tomatoes",
                "pest": "Slugs",
                "pest_lower": "slugs",
                "harvest": "twelve pounds of tomatoes",
            },
            {
                "veg": "zucchini",
                "pest": "Squirrels",
                "pest_lower": "squirrels",
                "harvest": "twenty zucchini",
            },
            {
                "veg": "kale",
                "pest": "Caterpillars",
                "pest_lower": "caterpillars",
                "harvest": "three big baskets of kale",
            },
            {
                "veg": "strawberries",
                "pest": "Birds",
                "pest_lower": "birds",
                "harvest": "four quarts of strawberries",
            },
        ),
        statement="I planted {veg} and a bunch of herbs in raised beds in the backyard.",
        detail="{pest} keep eating the {veg}, so I put netting over everything.",
        reaction="Look at you, a real gardener now.",
        followup_q="Did you build the beds yourself?",
        followup_a="With a lot of swearing and one YouTube video, yes.",
        update="I harvested {harvest} this week, way more than we can eat.",
        update_reaction="Save some for me!",
        echoes=(
            ("other", "My houseplants are all dying, I have zero green thumb."),
            ("other", "The farmers market had amazing {veg} on Saturday."),
            ("owner", "It's been so dry that I'm watering twice a day."),
        ),
        single=("What did {owner} plant in the raised beds?", ("statement",), "{veg} and herbs"),
        paraphrase=("Which crops is {owner} growing at home?", ("statement",), "{veg} and herbs"),
        temporal=("When did {owner} harvest {pos} {veg}?", ("update",), "{update_date}"),
        multi_hop=(
            "How big was {owner}'s harvest of the plants the {pest_lower} were eating?",
            ("detail", "update"),
            "{harvest}",
        ),
    ),
    Topic(
        key="volunteer",
        title="{owner}'s volunteering with {org}",
        slots=(
            {
                "org": "the Riverside Food Bank",
                "activity": "sorting donations",
                "coord": "Helen",
                "event": "charity auction",
                "raised": "$4,200",
            },
            {
                "org": "Paws Animal Rescue",
                "activity": "walking the older dogs",
                "coord": "Frank",
                "event": "bake sale",
                "raised": "$2,800",
            },
            {
                "org": "the Eastwood Literacy Project",
                "activity": "tutoring kids in reading",
                "coord": "Joyce",
                "event": "used book sale",
                "raised": "$3,100",
            },
            {
                "org": "the Greenway Park Trust",
                "activity": "planting trees along the river",
                "coord": "Malik",
                "event": "fun run",
                "raised": "$5,600",
            },
        ),
        statement="I've been volunteering with {org} on Saturday mornings, {activity}.",
        detail="The coordinator, {coord}, asked me to help organize their {event} next month.",
        reaction="That's really lovely of you.",
        followup_q="How did you get into that?",
        followup_a="A friend dragged me along once and I just kept going back.",
        update="The {event} raised {raised} for {org}, way above our goal!",
        update_reaction="All that planning paid off. Congrats!",
        echoes=(
            ("other", "I keep meaning to donate blood but never get around to it."),
            ("other", "Saturday mornings are sacred to me, I sleep until ten."),
            ("owner", "My arms are sore from carrying boxes all morning."),
        ),
        single=("Where does {owner} volunteer on Saturday mornings?", ("statement",), "{org}"),
        paraphrase=(
            "Which charity does {owner} give free time to every weekend?",
            ("statement",),
            "{org}",
        ),
        temporal=(
            "When did {owner} share how much the {event} raised?",
            ("update",),
            "{update_date}",
        ),
        multi_hop=(
            "How much money did the event that {coord} asked {owner} to organize bring in?",
            ("detail", "update"),
            "{raised}",
        ),
    ),
    Topic(
        key="engagement",
        title="{sib}'s engagement",
        slots=(
            {
                "relation": "brother",
                "relation_syn": "sibling",
                "sib": "Tomas",
                "fiance": "Greta",
                "region": "the Douro Valley",
                "role": "the officiant",
            },
            {
                "relation": "sister",
                "relation_syn": "sibling",
                "sib": "Clara",
                "fiance": "Mateo",
                "region": "Napa",
                "role": "giving the first toast",
            },
            {
                "relation": "cousin",
                "relation_syn": "relative",
                "sib": "Rafa",
                "fiance": "Lena",
                "region": "Tuscany",
                "role": "doing the flowers",
            },
            {
                "relation": "brother",
                "relation_syn": "sibling",
                "sib": "Jonah",
                "fiance": "Iris",
                "region": "the Finger Lakes",
                "role": "the photographer",
            },
        ),
        statement="My {relation} {sib} got engaged to {fiance} last night!",
        detail="The wedding will be at a vineyard in {region} next summer, and I'm {role}.",
        reaction="Oh my gosh, congratulations to them!",
        followup_q="Did you know it was coming?",
        followup_a="I helped pick the ring, so, yes.",
        update="{sib}'s wedding was perfect, except it rained right during the vows.",
        update_reaction="Rain on a wedding day is good luck, right?",
        echoes=(
            ("other", "Weddings are so expensive now, I don't know how anyone affords them."),
            ("other", "My cousin eloped and honestly that seems smart."),
            ("owner", "I've been to four weddings this year and my feet have not recovered."),
        ),
        single=("Who did {owner}'s {relation} get engaged to?", ("statement",), "{fiance}"),
        paraphrase=("Whom is {owner}'s {relation_syn} going to marry?", ("statement",), "{fiance}"),
        temporal=(
            "When did {sib} get engaged?",
            ("statement",),
            "the night before {statement_date}",
        ),
        multi_hop=(
            "What happened during the vows at the wedding in {region}?",
            ("detail", "update"),
            "it rained",
        ),
    ),
    Topic(
        key="baking",
        title="{owner}'s baking",
        slots=(
            {
                "dish": "lemon olive oil cake",
                "occasion": "my dad's birthday",
                "occasion_q": "a birthday",
                "secret": "a spoonful of yogurt in the batter",
                "relative": "grandmother",
                "contest": "county fair baking contest",
            },
            {
                "dish": "sourdough loaf",
                "occasion": "the office potluck",
                "occasion_q": "a potluck",
                "secret": "a long cold proof overnight",
                "relative": "uncle",
                "contest": "neighborhood bread-off",
            },
            {
                "dish": "apple pie",
                "occasion": "Thanksgiving",
                "occasion_q": "Thanksgiving",
                "secret": "grating frozen butter into the crust",
                "relative": "aunt",
                "contest": "church bake sale contest",
            },
            {
                "dish": "chocolate babka",
                "occasion": "my friend's housewarming",
                "occasion_q": "a housewarming",
                "secret": "brushing it with syrup while it's hot",
                "relative": "neighbor",
                "contest": "farmers market bake-off",
            },
        ),
        statement="I baked a {dish} from scratch for {occasion} and it actually turned out great.",
        detail="The secret was {secret}, a tip from my {relative}.",
        reaction="Save me a slice next time!",
        followup_q="Are you going to make it again?",
        followup_a="Probably every week until I get sick of it.",
        update="I entered my {dish} in the {contest} and won second place!",
        update_reaction="Second place! Who beat you?",
        echoes=(
            ("other", "I burned toast this morning, so I'm clearly not a baker."),
            ("other", "Is there a good bakery near your office?"),
            ("owner", "My oven runs hot, so everything is a guessing game."),
        ),
        single=("What did {owner} bake for {occasion_q}?", ("statement",), "{dish}"),
        paraphrase=(
            "Which treat did {owner} make by hand for a celebration?",
            ("statement",),
            "{dish}",
        ),
        temporal=(
            "When did {owner} win second place in the {contest}?",
            ("update",),
            "{update_date}",
        ),
        multi_hop=(
            "How did the recipe {owner} learned from {pos} {relative} do in a competition?",
            ("detail", "update"),
            "second place",
        ),
    ),
    Topic(
        key="school_play",
        title="{kid}'s school play",
        slots=(
            {
                "kid": "Lily",
                "kid_rel": "daughter",
                "k_pron": "she",
                "k_pos": "her",
                "character": "the Cheshire Cat",
                "play": "Alice in Wonderland",
            },
            {
                "kid": "Noah",
                "kid_rel": "son",
                "k_pron": "he",
                "k_pos": "his",
                "character": "Captain Hook",
                "play": "Peter Pan",
            },
            {
                "kid": "Ava",
                "kid_rel": "daughter",
                "k_pron": "she",
                "k_pos": "her",
                "character": "the Tin Man",
                "play": "The Wizard of Oz",
            },
            {
                "kid": "Eli",
                "kid_rel": "son",
                "k_pron": "he",
                "k_pos": "his",
                "character": "Willy Wonka",
                "play": "Charlie and the Chocolate Factory",
            },
        ),
        statement=(
            "My {kid_rel} {kid} got a lead role in the school's {play}, "
            "{k_pron}'s playing {character}."
        ),
        detail="Rehearsals are every day after school, so I've become a full-time chauffeur.",
        reaction="{kid} must be thrilled!",
        followup_q="Are you helping with costumes?",
        followup_a="I volunteered to sew, which was a mistake, I can't sew.",
        update="{kid}'s play was last night and {k_pron} didn't forget a single line.",
        update_reaction="What a star! You must have been so proud.",
        echoes=(
            ("other", "School pickup traffic is the worst part of my day."),
            ("other", "I was a tree in my school play and I'm still proud of it."),
            ("owner", "Our living room is covered in cardboard props right now."),
        ),
        single=(
            "Which role did {owner}'s {kid_rel} get in the school play?",
            ("statement",),
            "{character}",
        ),
        paraphrase=(
            "Which character will {owner}'s child portray on stage?",
            ("statement",),
            "{character}",
        ),
        temporal=("When was {kid}'s school play?", ("update",), "the night before {update_date}"),
        multi_hop=(
            "Did the kid playing {character} remember all {k_pos} lines?",
            ("statement", "update"),
            "yes",
        ),
    ),
    Topic(
        key="podcast",
        title="{owner}'s podcast",
        slots=(
            {
                "show": "Night Shift Notes",
                "subject": "nurses telling stories from work",
                "cohost": "Ray",
                "downloads": "10,000",
            },
            {
                "show": "Second Breakfast",
                "subject": "fantasy novels",
                "cohost": "Tess",
                "downloads": "5,000",
            },
            {
                "show": "Tiny Kitchens",
                "subject": "cooking in small apartments",
                "cohost": "Victor",
                "downloads": "8,000",
            },
            {
                "show": "Off the Map",
                "subject": "weird local history",
                "cohost": "June",
                "downloads": "12,000",
            },
        ),
        statement="I launched a podcast called {show}, it's about {subject}.",
        detail=(
            "We record on Sunday nights in my closet with my friend {cohost}, "
            "it's the only quiet spot."
        ),
        reaction="Send me the link, I'll listen on my commute.",
        followup_q="How long are the episodes?",
        followup_a="About forty minutes, if we don't get distracted.",
        update="{show} passed {downloads} downloads this month!",
        update_reaction="That's a real audience! Congrats.",
        echoes=(
            ("other", "I listen to way too many true crime podcasts."),
            ("other", "Is your microphone the one with the fuzzy cover?"),
            ("owner", "Editing audio takes four times longer than recording it."),
        ),
        single=("What is {owner}'s podcast called?", ("statement",), "{show}"),
        paraphrase=(
            "What's the title of the audio program {owner} started?",
            ("statement",),
            "{show}",
        ),
        temporal=(
            "When did {owner}'s podcast pass {downloads} downloads?",
            ("update",),
            "{update_date}",
        ),
        multi_hop=(
            "How many downloads did the show {owner} records with {cohost} reach?",
            ("detail", "update"),
            "{downloads}",
        ),
    ),
)

# (name, "f" or "m"): the speakers. None may appear inside a topic's slots.
PEOPLE: tuple[tuple[str, str], ...] = (
    ("Maya", "f"),
    ("Tom", "m"),
    ("Priya", "f"),
    ("Evan", "m"),
    ("Sofia", "f"),
    ("James", "m"),
    ("Aisha", "f"),
    ("Lucas", "m"),
    ("Hannah", "f"),
    ("Kofi", "m"),
    ("Grace", "f"),
    ("Felix", "m"),
    ("Chloe", "f"),
    ("Ethan", "m"),
    ("Nadia", "f"),
    ("Ben", "m"),
    ("Leila", "f"),
    ("Oscar", "m"),
    ("Ruth", "f"),
    ("Caleb", "m"),
    ("Isabel", "f"),
    ("Arjun", "m"),
    ("Yara", "f"),
    ("Simon", "m"),
)

# Two-person small talk; several pairs reuse topic words (dog, trip, class, car)
# so that a lexical match alone is not enough.
SMALL_TALK: tuple[tuple[str, str], ...] = (
    (
        "Did you end up watching that documentary about the ocean?",
        "Not yet, it's on my list for the weekend.",
    ),
    (
        "The weather has been awful here, rain every single day.",
        "Same here, my shoes are permanently wet.",
    ),
    ("Work has been crazy, three deadlines this week.", "Ugh, hang in there."),
    ("I tried that new ramen place downtown.", "Was it worth the line?"),
    ("My phone screen cracked again.", "You need a better case, seriously."),
    ("Have you been sleeping better lately?", "A bit, I stopped drinking coffee after noon."),
    ("I'm thinking about getting a standing desk.", "Do it, my back thanked me."),
    ("Did you catch the game last night?", "Only the last ten minutes, what a finish."),
    ("My landlord finally fixed the heating.", "About time, it's been weeks!"),
    ("I've been binge-watching a baking show.", "Which one? I need something new to watch."),
    (
        "I saw a dog today that looked exactly like a teddy bear.",
        "Those are the best kind of dogs.",
    ),
    ("Flights are so expensive this year.", "Tell me about it, I priced out a trip and gave up."),
    (
        "My neighbor started growing vegetables on his balcony.",
        "Impressive, I can't even keep a cactus alive.",
    ),
    (
        "I keep meaning to sign up for some kind of class.",
        "You should, something with your hands maybe.",
    ),
    (
        "A coworker just ran a marathon and won't stop talking about it.",
        "Ha, marathon people are like that.",
    ),
    ("My inbox is a disaster, four hundred unread emails.", "Declare bankruptcy and start over."),
    ("I finally cleaned out my closet this weekend.", "Did you find anything good in there?"),
    ("Do you have any podcast recommendations for long drives?", "I'll send you a few later."),
    ("I've been trying to cook at home more.", "Same, takeout was getting expensive."),
    ("My car made a weird noise this morning.", "Uh oh, get that checked before it gets worse."),
    ("Our team had a party at work on Friday.", "Fun! Was there karaoke?"),
    ("I went to the museum with my cousin on Sunday.", "Which exhibit did you see?"),
    ("I'm so tired, I stayed up way too late reading.", "Was the book at least good?"),
    ("The new coffee shop near me does a great oat latte.", "Now I'm craving one."),
    ("My mom called to ask about the holidays already.", "It's never too early for moms."),
    ("I've started walking to work to get some exercise.", "Nice, how long does it take?"),
    ("I might repaint my bedroom this weekend.", "What color are you thinking?"),
    ("We had a power outage last night for three hours.", "Did you at least light some candles?"),
    (
        "I got a parking ticket outside the gym, of all places.",
        "The universe is telling you to skip the gym.",
    ),
    ("Have you tried that meal kit everyone is advertising?", "Once, the portions were tiny."),
    (
        "My sister keeps sending me wedding dress photos for her friend.",
        "Is she helping plan the whole thing?",
    ),
    ("There's a music festival in the park next month.", "We should go if the lineup is good."),
)

# (greeting, replies that fit it)
GREETINGS: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "Hey {other}! How's it going?",
        ("Hey {speaker}! Pretty good, just tired. You?", "Not bad at all! How about you?"),
    ),
    (
        "Hi {other}, it's been a while! How are you?",
        ("I know, too long! I'm good. You?", "Hi! Busy but good. What's new with you?"),
    ),
    (
        "{other}! Got a minute to talk?",
        ("Always have a minute for you. What's up?", "Sure, I'm just making tea. Go ahead."),
    ),
    (
        "Hey you. How was your week?",
        ("Long week, but I survived. How about yours?", "Honestly not bad! Yours?"),
    ),
    (
        "Morning, {other}! Sorry I missed your call yesterday.",
        ("No worries! I'm good. How are things?", "All good, it wasn't urgent. How are you?"),
    ),
    (
        "Hi! I have news, but first, how are you?",
        ("I'm fine, but now I'm curious!", "Good! Don't keep me waiting though."),
    ),
)
CLOSINGS = (
    "I should get going, dinner's almost ready. Talk soon!",
    "Okay, I have a meeting in five minutes. Let's talk again soon!",
    "It's late, I'm heading to bed. Good talking to you!",
    "I have to run, but this was nice. Talk next week?",
    "Alright, my battery is dying. Bye for now!",
)
CLOSING_REPLIES = (
    "Bye! Take care, {other}.",
    "Talk soon!",
    "Good night! Let me know how everything goes.",
    "Definitely. Bye!",
    "Bye, {other}!",
)
BRIDGES = (
    "Anyway, what else is new with you?",
    "Ha, okay. Anything else going on?",
    "Oh, and how's everything else?",
    "Wait, before I forget, any other news?",
    "Okay, tell me more about your week.",
    "Mm-hm. What else?",
)
ECHO_REPLIES = (
    "Ha, I know what you mean.",
    "Right? Same here.",
    "Honestly, fair.",
    "Oh no, that's annoying.",
    "Ha, classic.",
    "Tell me about it.",
)
# Chatty clauses appended to some turns (facts included), as real chat turns
# carry far more than their one fact; they dilute embeddings and share
# everyday words across topics.
TAILS = (
    "Honestly, it's been a strange few weeks.",
    "Anyway, I'm rambling again.",
    "Work has been hectic, so it's nice to have something else to think about.",
    "My mom was thrilled when I told her.",
    "Funny how things work out sometimes.",
    "I still can't quite believe it.",
    "We should celebrate at some point.",
    "The weekend went by way too fast, as usual.",
    "Everyone in my family keeps asking about it.",
    "I'll send you photos later.",
    "It feels like forever since we talked properly.",
    "I was so nervous about it at first.",
    "You always get excited about this stuff with me, I love that.",
    "Not going to lie, I'm a little tired.",
    "I keep telling myself to slow down and enjoy things.",
    "Life has been a lot lately, but in a good way.",
    "I know it sounds silly, but it really made my day.",
    "Let me know what you think.",
    "Sorry, I've been terrible at texting back.",
    "Remind me to tell you the full story sometime.",
    "My roommate thinks I'm crazy.",
    "It's been on my mind all day.",
    "Small wins, right?",
    "I'm trying to be more positive about everything.",
)

# How a question names a topic without its specifics, e.g. "What did Maya tell
# Tom about her dog on 8 May 2023?": the topic comes up in several sessions,
# so only the date says which turns answer.
ABOUT: dict[str, str] = {
    "dog": "{pos} dog",
    "job": "{pos} job",
    "move": "the move",
    "race": "{pos} race",
    "craft": "{pos} class",
    "car": "{pos} car",
    "trip": "{pos} trip",
    "book": "{pos} book club",
    "injury": "{pos} injury",
    "renovation": "the renovation",
    "concert": "the concert",
    "language": "{pos} lessons",
    "garden": "{pos} garden",
    "volunteer": "{pos} volunteering",
    "engagement": "the wedding",
    "baking": "{pos} baking",
    "school_play": "the school play",
    "podcast": "{pos} podcast",
}
