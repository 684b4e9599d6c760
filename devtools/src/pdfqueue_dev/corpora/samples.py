"""Deterministic sample résumé corpora (PDFs, users, expected outcomes) for demos and tests."""

from __future__ import annotations

import random
import re
import zipfile
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING

from fpdf import FPDF

if TYPE_CHECKING:
    import asyncpg

FIXED_DATE = datetime(2024, 1, 1, tzinfo=UTC)
ZIP_DATE = (2024, 1, 1, 0, 0, 0)
JUNK_MEMBERS = ("resumes/", "notes.txt", "__MACOSX/._x")
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_NAME_EMAIL = re.compile(r"^([a-z]+)\.([a-z]+)(?:\.\d+)?@")


def _words(s: str) -> list[str]:
    return s.split()


FIRST = _words("ada alan grace linus barbara edsger frances ken dennis margaret john radia tim"
               " donald sophie maria omar priya chen lena noah elena hugo ines yusuf")  # fmt: skip
LAST = _words("lovelace turing hopper torvalds liskov dijkstra allen thompson ritchie hamilton"
              " backus perlman lee knuth wilson garcia haddad patel wang novak fischer rossi"
              " martin silva kaya okafor mensah ivanova sharma berg")  # fmt: skip
COMPANIES = _words("Northwind Contoso Initech Globex Umbrella Hooli Vandelay Stark Wayne Acme"
                   " Soylent Cyberdyne Tyrell Wonka")  # fmt: skip
TITLES = ["Software Engineer", "Data Analyst", "Product Manager", "Site Reliability Engineer",
          "Backend Developer", "QA Engineer", "Technical Writer", "Engineering Manager",
          "Designer", "Support Specialist"]  # fmt: skip
VERBS = _words("Built Led Designed Migrated Automated Reduced Improved Shipped Maintained"
               " Mentored Launched Refactored")  # fmt: skip
OBJECTS = ["the billing pipeline", "a customer dashboard", "CI build times by 40 percent",
           "the on-call rotation", "a search service", "legacy reports to SQL",
           "the mobile onboarding flow", "data quality checks", "an internal API gateway",
           "release tooling", "capacity planning", "four junior engineers"]  # fmt: skip
SCHOOLS = ["State University", "Institute of Technology", "City College", "Polytechnic School",
           "Open University"]  # fmt: skip
DEGREES = ["BSc Computer Science", "MSc Data Science", "BA Economics", "BEng Software",
           "MBA", "BSc Mathematics"]  # fmt: skip
SKILLS = _words("Python Go SQL PostgreSQL Redis Kubernetes Docker Terraform React TypeScript"
                " Rust Kafka Airflow Linux AWS GCP Excel Figma Jira Spark")  # fmt: skip
CITIES = ["Lisbon", "Berlin", "Toronto", "Austin", "Nairobi", "Dublin", "Madrid", "Oslo"]
MONTHS = _words("Jan Feb Mar Apr May Jun Jul Aug Sep Oct Nov Dec")
DECOYS = ["hr@formercorp.example", "jobs@recruit.example", "references@oldemployer.example"]


class Expect(StrEnum):
    """The outcome the system should record for one file."""

    LINKED = "linked"
    NO_MATCH = "skipped_no_match"
    ALREADY = "skipped_already_exists"
    FAILED = "failed"


@dataclass(frozen=True)
class SampleUser:
    """A row of the host app's users table; pdf_url set means "already linked"."""

    id: int
    email: str
    name: str
    pdf_url: str | None


@dataclass(frozen=True)
class SampleFile:
    """One PDF of the corpus; email is the address it contains (lower case), if any."""

    name: str
    kind: str
    email: str | None
    expect: Expect
    reason: str | None


@dataclass(frozen=True)
class Mix:
    """Relative share of each file kind (normalised, so they need not sum to 1)."""

    known: float = 0.72
    no_email: float = 0.08
    unknown_email: float = 0.08
    already_linked: float = 0.06
    corrupt: float = 0.03
    encrypted: float = 0.03


CLEAN = Mix(known=1.0, no_email=0, unknown_email=0, already_linked=0, corrupt=0, encrypted=0)
_KIND_EXPECT: dict[str, tuple[Expect, str | None]] = {
    "known": (Expect.LINKED, None),
    "no_email": (Expect.NO_MATCH, "no_email"),
    "unknown_email": (Expect.NO_MATCH, "no_user"),
    "already_linked": (Expect.ALREADY, "already_linked"),
    "corrupt": (Expect.FAILED, "unreadable"),
    "encrypted": (Expect.FAILED, "encrypted"),
}


@dataclass
class Corpus:
    """Users to seed and files to zip, with the expected outcome of each file."""

    users: list[SampleUser]
    files: list[SampleFile]

    def counts(self) -> dict[str, int]:
        """Expected final counter per Expect value (zeros included)."""
        c = Counter(f.expect.value for f in self.files)
        return {e.value: c[e.value] for e in Expect}


def _allocate(n: int, mix: Mix) -> dict[str, int]:
    """Split n into kinds by largest remainder, so the counts are exact and sum to n."""
    shares = {k: max(0.0, float(getattr(mix, k))) for k in _KIND_EXPECT}
    total = sum(shares.values())
    if total <= 0:
        raise ValueError("mix has no positive share")
    raw = {k: n * v / total for k, v in shares.items()}
    out = {k: int(v) for k, v in raw.items()}
    for k in sorted(raw, key=lambda k: out[k] - raw[k])[: n - sum(out.values())]:
        out[k] += 1
    return out


def build_corpus(n_files: int, *, seed: int = 0, mix: Mix = Mix(), extra_users: int = 50) -> Corpus:
    """Plan a corpus: which file is which kind, and the users table. No PDF bytes yet."""
    rng = random.Random(seed)
    kinds = [k for k, c in _allocate(n_files, mix).items() for _ in range(c)]
    rng.shuffle(kinds)
    owners = [i for i, k in enumerate(kinds) if k in ("known", "already_linked")]
    n_users = len(owners) + extra_users
    ids = rng.sample(range(1, n_users + 1), n_users)
    users: dict[int, SampleUser] = {}
    for uid in range(1, n_users + 1):
        first, last = rng.choice(FIRST), rng.choice(LAST)
        users[uid] = SampleUser(
            uid, f"{first}.{last}.{uid}@people.example", f"{first} {last}", None
        )
    owner_of = dict(zip(owners, ids, strict=False))
    files: list[SampleFile] = []
    for i, kind in enumerate(kinds):
        email: str | None
        if i in owner_of:
            u = users[owner_of[i]]
            if kind == "already_linked":
                u = users[u.id] = SampleUser(u.id, u.email, u.name, f"pdfs/legacy/{u.id}.pdf")
            email, last = u.email, u.name.split()[1]
        else:
            first, last = rng.choice(FIRST), rng.choice(LAST)
            email = None if kind == "no_email" else f"{first}.{last}@mailbox.example"
        expect, reason = _KIND_EXPECT[kind]
        files.append(SampleFile(f"resumes/{i + 1:05d}-{last}.pdf", kind, email, expect, reason))
    return Corpus(users=[users[k] for k in sorted(users)], files=files)


def _period(rng: random.Random, end_year: int) -> tuple[str, int]:
    start = end_year - rng.randint(1, 4)
    end = "Present" if end_year >= 2024 else f"{rng.choice(MONTHS)} {end_year}"
    return f"{rng.choice(MONTHS)} {start} - {end}", start


def _mixed_case(email: str) -> str:
    local, _, _domain = email.partition("@")
    return ".".join(p.capitalize() for p in local.split(".")) + "@People.EXAMPLE"


def _doc(f: SampleFile, rng: random.Random) -> FPDF:
    m = _NAME_EMAIL.match(f.email or "")
    last = f.name.rsplit("-", 1)[-1].removesuffix(".pdf")
    first, last = (m.group(1), m.group(2)) if m else (rng.choice(FIRST), last)
    pages = rng.randint(1, 3)
    shown = f.email
    decoy = last_page = False
    if f.kind == "known" and f.email:
        if rng.random() < 0.15:
            shown = _mixed_case(f.email)
        decoy = rng.random() < 0.10
        last_page = rng.random() < 0.10
        pages = max(pages, 2) if last_page else pages
    pdf = FPDF(format="A4")
    pdf.set_creation_date(FIXED_DATE)
    pdf.set_title(f"Resume - {first.title()} {last.title()}")
    pdf.set_auto_page_break(auto=True, margin=15)
    pdf.set_margins(18, 18, 18)

    def text(s: str, size: float = 10, style: str = "", h: float = 5.5) -> None:
        pdf.set_font("Helvetica", style, size)
        pdf.multi_cell(0, h, s, new_x="LMARGIN", new_y="NEXT")

    def heading(s: str) -> None:
        pdf.ln(3)
        text(s.upper(), 12, "B", 7)

    pdf.add_page()
    text(f"{first.title()} {last.title()}", 22, "B", 11)
    text(rng.choice(TITLES), 13, "I", 7)
    if decoy:
        text(f"Referred by the hiring team at {rng.choice(COMPANIES)}: {rng.choice(DECOYS)}")
    contact = [f"{rng.choice(CITIES)}", f"+1 555 {rng.randint(1000, 9999)}"]
    if shown and not last_page:
        contact.append(shown)
    contact.append(f"linkedin.example/in/{first}-{last}")
    text(" | ".join(contact))
    heading("Summary")
    text(
        f"{rng.choice(TITLES)} with {rng.randint(2, 15)} years of experience. "
        f"{rng.choice(VERBS)} {rng.choice(OBJECTS)} and {rng.choice(OBJECTS)}. "
        f"Comfortable with {', '.join(rng.sample(SKILLS, 3))}."
    )
    year = 2024
    for page in range(1, pages + 1):
        if page > 1:
            pdf.add_page()
        heading("Experience" if page == 1 else "Experience (continued)")
        for _ in range(2 if page == 1 else 3):
            dates, year = _period(rng, year)
            text(f"{rng.choice(TITLES)}, {rng.choice(COMPANIES)} - {dates}", 11, "B", 6.5)
            for _ in range(rng.randint(2, 4)):
                text(f"- {rng.choice(VERBS)} {rng.choice(OBJECTS)}.")
            year -= 1
        if page == pages:
            heading("Education")
            text(f"{rng.choice(DEGREES)}, {rng.choice(SCHOOLS)}, {year - rng.randint(0, 3)}")
            heading("Skills")
            text(", ".join(rng.sample(SKILLS, rng.randint(5, 9))))
            if last_page and shown:
                text(f"Contact: {shown}")
    return pdf


def render_pdf(f: SampleFile, *, seed: int) -> bytes:
    """Render one file of the corpus; the same file and seed always give the same bytes."""
    index = int(f.name.removeprefix("resumes/")[:5])
    rng = random.Random(seed + index)
    pdf = _doc(f, rng)
    if f.kind == "encrypted":
        # RC4 (fpdf2's default) needs no `cryptography` and stays deterministic; AES salts urandom.
        pdf.set_encryption(owner_password=f"owner-{rng.random()}", user_password=f"u{rng.random()}")
    data = bytes(pdf.output())
    if f.kind == "corrupt":
        # Keep the %PDF- header, cut the tail (catalog, xref, trailer), point startxref nowhere.
        data = data[: int(len(data) * 0.4)] + b"\nxref\n0 1\nGARBAGE\nstartxref\n999999\n%%EOF\n"
    return data


def member_info(name: str) -> zipfile.ZipInfo:
    """A deflated, world-readable file member with a fixed date: the same bytes every time."""
    info = zipfile.ZipInfo(name, date_time=ZIP_DATE)
    info.compress_type = zipfile.ZIP_DEFLATED
    info.external_attr = 0o644 << 16
    return info


def write_zip(corpus: Corpus, path: Path, *, seed: int = 0, junk: bool = True) -> Path:
    """Write the corpus as a ZIP, rendering and adding one PDF at a time."""
    path.parent.mkdir(parents=True, exist_ok=True)
    info = member_info
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        if junk:
            d = zipfile.ZipInfo(JUNK_MEMBERS[0], date_time=ZIP_DATE)
            d.CRC = d.compress_size = d.file_size = 0  # ZipFile.mkdir(ZipInfo) leaves them unset
            d.external_attr = (0o40755 << 16) | 0x10
            zf.mkdir(d)
            zf.writestr(info(JUNK_MEMBERS[1]), "Batch of sample resumes. Not a PDF.\n")
        for f in corpus.files:
            zf.writestr(info(f.name), render_pdf(f, seed=seed))
        if junk:
            zf.writestr(info(JUNK_MEMBERS[2]), b"\x00\x05\x16\x07\x00\x02\x00\x00Mac OS X        ")
    return path


async def seed_users(
    conn: asyncpg.Connection, users: list[SampleUser], *, table: str = "users"
) -> None:
    """Create (if needed) and refill the users table with the sample users."""
    if not _IDENT.fullmatch(table):
        raise ValueError(f"invalid table name: {table!r}")
    q, idx = f'"{table}"', f'"{table}_lower_email_idx"'
    await conn.execute(
        f"CREATE TABLE IF NOT EXISTS {q} (id bigint primary key, email text not null unique, "
        "pdf_url text)"
    )
    await conn.execute(f"CREATE INDEX IF NOT EXISTS {idx} ON {q} (lower(email))")
    await conn.execute(f"TRUNCATE {q}")
    # copy_records_to_table quotes the identifier itself, so pass the bare (validated) name.
    await conn.copy_records_to_table(
        table,
        records=[(u.id, u.email.lower(), u.pdf_url) for u in users],
        columns=["id", "email", "pdf_url"],
    )
