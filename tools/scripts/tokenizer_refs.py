#!/usr/bin/env python3
"""Makes the tokenizer's reference test data with Hugging Face `tokenizers` (run once; the
outputs are committed under tests/data/tokenizer/ so the C tests need no Python).

1. Converts the llama2.c tokenizer shared/models/stories260K/tok512.bin into a Hugging Face
   Llama-2-style tokenizer.json (BPE with byte_fallback; merges ranked by descending score of the
   merged piece, ties in vocabulary order; normalizer Prepend "▁" + Replace " " -> "▁"; decoder
   Replace/ByteFallback/Fuse/Strip; TemplateProcessing adding <s>).
2. Derives small variants that exercise the other stages weft supports: "spm_legacy" (the
   same vocabulary with the older Metaspace pre-tokenizer and decoder, NFKC + Lowercase, Digits,
   and added tokens with lstrip / rstrip / single_word), "bytelevel_small" (a byte-level BPE
   trained here by `tokenizers` with the GPT-2 ByteLevel pre-tokenizer regex, add_prefix_space,
   RobertaProcessing and added tokens) and "bytelevel_llama3" (that vocabulary with Llama 3's
   Split regex, ignore_merges and a TemplateProcessing BOS).
3. Generates deterministic strings (many scripts, emoji, code, digits, whitespace runs, special
   and added tokens, NFC edge cases) and writes, per tokenizer, a JSON-lines file: a header
   line naming the tokenizer, then one line per string with the ids HF gives with
   add_special_tokens=True ("ids"), the ids with special tokens not parsed ("raw", only when they
   differ), and HF's decode of "ids" with and without skip_special_tokens ("d" / "ds", only when
   they differ from the text).

   It also writes bytelevel_llama3.gguf, the same vocabulary as a llama.cpp vocab GGUF
   (tokenizer.ggml.model "gpt2", pre "llama-bpe"), which must encode like the tokenizer.json.
4. Writes normalization.jsonl: strings heavy in combining marks, Hangul, compatibility characters
   and case, with their NFC, NFD, NFKC and NFKD forms and lowercase from Python's unicodedata.
5. Writes the seed corpus of the fuzz target (tests/fuzz/corpus/tokenizer/): the tokenizers above
   (mode byte 0), sample strings (modes 1 and 2), vocab GGUFs (mode 3) and id lists (4).

Usage: /work/venv/bin/python tools/scripts/tokenizer_refs.py [--shared DIR] [--out DIR]
"""
import argparse
import json
import os
import random
import struct
import sys
import unicodedata

from tokenizers import Tokenizer, models, pre_tokenizers, trainers, processors, decoders

SPIECE = "\u2581"


# ---- 1. stories260K tok512.bin -> tokenizer.json ---------------------------------------------
def read_tok512(path):
    b = open(path, "rb").read()
    (max_len,) = struct.unpack_from("<i", b, 0)
    off, toks = 4, []
    while off < len(b):
        score, n = struct.unpack_from("<fi", b, off)
        off += 8
        toks.append((score, b[off:off + n]))
        off += n
    return toks


def stories_tokenizer(tok512):
    toks = read_tok512(tok512)
    vocab, scores = {}, {}
    for i, (score, raw) in enumerate(toks):
        if i == 0:
            piece = "<unk>"
        elif i == 1:
            piece = "<s>"
        elif i == 2:
            piece = "</s>"
        elif 3 <= i <= 258:
            piece = raw.decode("ascii")  # "<0xNN>"
        else:
            piece = raw.decode("utf-8").replace(" ", SPIECE)
        if piece in vocab:
            raise SystemExit("duplicate piece %r at id %d" % (piece, i))
        vocab[piece] = i
        scores[piece] = score
    merges = []
    for piece, pid in vocab.items():
        if pid < 259 or len(piece) < 2:
            continue
        local = []
        for cut in range(1, len(piece)):
            left, right = piece[:cut], piece[cut:]
            if left in vocab and right in vocab and vocab[left] >= 259 and vocab[right] >= 259:
                local.append((vocab[left], vocab[right], left, right))
        local.sort()
        for _, _, left, right in local:
            merges.append((scores[piece], pid, left, right))
    # Descending score of the merged piece; Python's sort is stable, so ties stay in id order.
    merges.sort(key=lambda m: (-m[0], m[1]))
    special = lambda i, c: {"id": i, "content": c, "single_word": False, "lstrip": False,
                            "rstrip": False, "normalized": False, "special": True}
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [special(0, "<unk>"), special(1, "<s>"), special(2, "</s>")],
        "normalizer": {"type": "Sequence", "normalizers": [
            {"type": "Prepend", "prepend": SPIECE},
            {"type": "Replace", "pattern": {"String": " "}, "content": SPIECE}]},
        "pre_tokenizer": None,
        "post_processor": {
            "type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                       {"Sequence": {"id": "A", "type_id": 0}}],
            "pair": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                     {"Sequence": {"id": "A", "type_id": 0}},
                     {"SpecialToken": {"id": "<s>", "type_id": 1}},
                     {"Sequence": {"id": "B", "type_id": 1}}],
            "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}},
        "decoder": {"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": SPIECE}, "content": " "},
            {"type": "ByteFallback"},
            {"type": "Fuse"},
            {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
        "model": {"type": "BPE", "dropout": None, "unk_token": "<unk>",
                  "continuing_subword_prefix": None, "end_of_word_suffix": None,
                  "fuse_unk": True, "byte_fallback": True, "ignore_merges": False,
                  "vocab": vocab, "merges": [[l, r] for _, _, l, r in merges]},
    }


# ---- 2. variants ----------------------------------------------------------------------------
def spm_legacy_tokenizer(base):
    t = json.loads(json.dumps(base))
    # Normalized added tokens are searched for in their normalized form ("DOG" as "dog").
    t["normalizer"] = {"type": "Sequence", "normalizers": [{"type": "NFKC"}, {"type": "Lowercase"}]}
    t["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
        {"type": "Digits", "individual_digits": True},
        {"type": "Metaspace", "replacement": SPIECE, "add_prefix_space": True}]}
    t["decoder"] = {"type": "Sequence", "decoders": [
        {"type": "ByteFallback"}, {"type": "Metaspace", "replacement": SPIECE,
                                   "add_prefix_space": True}]}
    # Merge strings in the "a b" form here, to cover that spelling too.
    t["model"]["merges"] = ["%s %s" % (l, r) for l, r in t["model"]["merges"]]
    t["model"]["fuse_unk"] = False
    n = len(t["model"]["vocab"])
    extra = [("[MASK]", True, True, True, False, False), ("<sep>", True, False, True, False, False),
             ("cat", False, False, False, True, True), ("[b]", False, True, False, False, True),
             ("DOG", False, False, False, False, True), ("\uff26\uff29", False, False, False,
                                                         False, True)]
    for k, (content, special, lstrip, rstrip, single, normalized) in enumerate(extra):
        t["added_tokens"].append({"id": n + k, "content": content, "single_word": single,
                                  "lstrip": lstrip, "rstrip": rstrip, "normalized": normalized,
                                  "special": special})
    t["post_processor"] = {"type": "RobertaProcessing", "sep": ["</s>", 2], "cls": ["<s>", 1],
                           "trim_offsets": True, "add_prefix_space": True}
    return t


def bytelevel_small_tokenizer(corpus):
    tk = Tokenizer(models.BPE())
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True, use_regex=True)
    tk.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=1200, min_frequency=2, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  special_tokens=["<pad>", "<s>", "</s>"])
    tk.train_from_iterator(corpus, trainer=trainer)
    tk.post_processor = processors.RobertaProcessing(("</s>", 2), ("<s>", 1))
    t = json.loads(tk.to_str())
    n = tk.get_vocab_size()
    t["added_tokens"].append({"id": n, "content": "<|user|>", "single_word": False, "lstrip": False,
                              "rstrip": True, "normalized": False, "special": True})
    t["added_tokens"].append({"id": n + 1, "content": " the ", "single_word": False,
                              "lstrip": False, "rstrip": False, "normalized": True,
                              "special": False})
    return t


LLAMA3_REGEX = ("(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?"
                "[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+")


def bytelevel_llama3_tokenizer(base):
    t = json.loads(json.dumps(base))
    t["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": LLAMA3_REGEX}, "behavior": "Isolated",
         "invert": False},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]}
    t["model"]["ignore_merges"] = True
    t["post_processor"] = {"type": "Sequence", "processors": [
        {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": True},
        {"type": "TemplateProcessing",
         "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                    {"Sequence": {"id": "A", "type_id": 0}}],
         "pair": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                  {"Sequence": {"id": "A", "type_id": 0}},
                  {"SpecialToken": {"id": "<s>", "type_id": 1}},
                  {"Sequence": {"id": "B", "type_id": 1}}],
         "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}}]}
    return t


# ---- 3. strings ------------------------------------------------------------------------------
SCRIPTS = {
    "latin": "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZàáâãäåæçèéêëìíîïñòóôõöøùúûüýÿßœŒšžŁłđĐğŞı",
    "greek": "αβγδεζηθικλμνξοπρστυφχψωΑΒΓΔΕΖΗΘΙΚΛΜΝΞΟΠΡΣΤΥΦΧΨΩάέήίόύώϊϋΐΰς",
    "cyrillic": "абвгдеёжзийклмнопрстуфхцчшщъыьэюяАБВГДЕЁЖЗИЙКЛМНОПРСТУФХЦЧШЩЪЫЬЭЮЯіїєґў",
    "armenian": "աբգդեզէըթժիլխծկհձղճմյնշոչպջռսվտրցւփքօֆԱԲԳԴԵԶ",
    "hebrew": "אבגדהוזחטיכלמנסעפצקרשתםןףץך\u05b0\u05b4\u05b7\u05bc",
    "arabic": "ابتثجحخدذرزسشصضطظعغفقكلمنهويءآأؤإئة\u064b\u064e\u064f\u0650\u0651\u0652٠١٢٣٤٥٦٧٨٩",
    "devanagari": "अआइईउऊएऐओऔकखगघचछजझटठडढणतथदधनपफबभमयरलवशषसह\u093e\u093f\u0940\u0941\u0942\u0947\u0948\u094b\u094c\u094d\u0902\u0903०१२३४५६७८९",
    "bengali": "অআইঈউঊএঐওঔকখগঘচছজঝটঠডঢণতথদধনপফবভমযরলশষসহ\u09be\u09bf\u09c0\u09c7\u09cb\u09cd",
    "tamil": "அஆஇஈஉஊஎஏஐஒஓஔகஙசஞடணதநபமயரலவழளறன\u0bbe\u0bbf\u0bc0\u0bc6\u0bca\u0bcd",
    "thai": "กขฃคฅฆงจฉชซฌญฎฏฐฑฒณดตถทธนบปผฝพฟภมยรลวศษสหฬอฮะ\u0e31าำ\u0e34\u0e35\u0e36\u0e37\u0e38\u0e39เแโใไ\u0e48\u0e49\u0e4a\u0e4b",
    "georgian": "აბგდევზთიკლმნოპჟრსტუფქღყშჩცძწჭხჯჰ",
    "ethiopic": "ሀሁሂሃሄህሆለሉሊላሌልሎሐመሙሚማሜምሞሠረሩሪራሬርሮሰሱሲሳሴስሶ",
    "khmer": "កខគឃងចឆជឈញដឋឌឍណតថទធនបផពភមយរលវសហឡអ\u17b6\u17b7\u17b8\u17b9\u17ba\u17bb\u17bc\u17c1\u17c2\u17c4\u17d2",
    "hangul": "가각간갇갈감갑강개객거건걸검겁게겨격견결겸경계고곡곤골곰공과관광괴교구국군굴궁권귀규균그극근글금급기긴길김까꼬꾸끄나낙난날남납낭내냉너널네녀년념노논놀농뇌누눈느는늘능니님다닥단달담답당대댁더덕던덜덤도독돈돌동되된두둑둘둠뒤드득든들등디따때또뚜뜨라락란람랑래랭략량러럭런럼렁레려력련렬렴령례로록론롬롱뢰료룡루류륙률르륵른름릉리린림립마막만많말맘맛망매맥맹머먹먼멀멈메며면멸명모목몰몸몽묘무묵문물뭐미민밀밑바박반발밤밥방배백뱀버번벌범법벗벽변별병보복본볼봄봉부북분불붉붓비빈빌빔빛빠빨뻐뼈뿌쁘사삭산살삶삼상새색생서석선설섬성세소속손솔송쇄수숙순술숨숭쉬스슬습승시식신실심십싸쌀쌍써쏘쑤쓰씨아악안앉알암압앙애액야약양어억언얼엄업없엉에여역연열염엽영예오옥온올옷와완왕외요욕용우욱운울움웃원월위유육윤율은을음읍응의이익인일읽임입잇있자작잔잘잠잡장재쟁저적전절점접정제조족존졸종좋좌죄주죽준줄중쥐즈즉즐증지직진질짐집짓징짜째쪽찌차착찬찰참창채책처척천철첨첩청체초촉촌총최추축춘출춤충취츠측층치칙친칠침칭카칼캐커컴케코콘콜콩쾌크큰클키타탁탄탈탐탑탕태택터텅테토톤톱통퇴투특튼틀티파판팔패퍼페펴편평폐포폭표푸품풍프피필핏하학한할함합항해핵행향허헌험혀혁현혈협형혜호혹혼홀홍화확환활황회획효후훈훔휘휴흉흐흑흔흘흙흥희흰히힘",
    "jamo": "\u1100\u1101\u1102\u1103\u1105\u1106\u1107\u1109\u110b\u110c\u1161\u1162\u1165\u1166\u1169\u116e\u1173\u1175\u11a8\u11ab\u11af\u11b7\u11bc",
    "cjk": "的一是不了人我在有他这中大来上国个到说们为子和你地出道也时年得就那要下以生会自着去之过家学对可她里后小么心多天而能好都然没日于起还发成事只作当想看文无开手十用主行方又如前所本见经头面公同三已老从动两长知民样现分将外但身些与高意进把法此实回二理美点月明其种声全工己话儿者向情部正名定女问力机给等几很业最间新什打便位因重被走电四第门相次东政海口使教西再平真听世气信北少关并内加化由却代军产入先山五太水万市眼体别处总才场师书比住员九笑性通目华报立马命张活难神数件安表原车白应路期叫死常提感金何更反合放做系计或司利受光王果亲界及今京务制解各任至清物台象记边共风战干接它许八特觉望直服毛林题建南度统色字请交爱让认算论百吃义科怎元社术结六功指思非流每青管夫连远资队跟带花快条院变联言权往展该领传近留红治决周保达办运武半候七必城父强步完革深区即求品士转量空甚众技轻程告江语英基派满式李息写呢识极令黄德收脸钱党倒未持取设始版双历越史商千片容研像找友孩站广改议形委早房音火际则首单据导影失拿网香似斯专石若兵弟谁校读志飞观争究包组造落视济喜离虽坐集编宝谈府拉黑且随格尽剑讲布杀微怕母调局根曾准团段终乐切级克精哪官示冷域读",
    "kana": "あいうえおかきくけこさしすせそたちつてとなにぬねのはひふへほまみむめもやゆよらりるれろわをんがぎぐげござじずぜぞだぢづでどばびぶべぼぱぴぷぺぽゃゅょっーアイウエオカキクケコサシスセソタチツテトナニヌネノハヒフヘホマミムメモヤユヨラリルレロワヲンガギグゲゴザジズゼゾダヂヅデドバビブベボパピプペポャュョッヴ",
    "halfwidth": "ｱｲｳｴｵｶｷｸｹｺｻｼｽｾｿﾀﾁﾂﾃﾄﾞﾟＡＢＣａｂｃ０１２３！？",
    "symbols": "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~¡¢£¤¥¦§¨©ª«¬®¯°±²³´µ¶·¸¹º»¼½¾¿×÷‐‑‒–—―‘’‚‛“”„‟†‡•…‰′″‹›€₹₽™←↑→↓↔∀∂∃∅∇∈∉∑√∞∧∨∩∪∫≈≠≡≤≥⊂⊃⊕⊗─│┌┐└┘├┤┬┴┼═║■□▲△▼▽◆◇○●★☆♠♣♥♦♪♫",
    "emoji": ["😀", "😁", "😂", "🤣", "😊", "😍", "🤔", "😴", "😭", "😡", "👍", "👎", "👏", "🙏", "💪", "🔥",
              "✨", "🎉", "❤️", "💔", "⭐", "🌍", "🚀", "🐍", "🦀", "🍕", "☕", "⚡", "✅", "❌",
              "👩‍💻", "👨‍👩‍👧‍👦", "🏳️‍🌈", "👍🏽", "🧑🏿‍🚀", "🇺🇸", "🇯🇵", "🇩🇪", "🇫🇷",
              "1️⃣", "#️⃣", "©️", "™️", "🫠", "🥲", "🪄", "🛝"],
}

NFC_CASES = ["e\u0301", "a\u0308", "o\u0302\u0301", "a\u0323\u0302", "a\u0302\u0323", "\u212b",
             "\u2126", "\u1e9b\u0323", "\u0958", "\u0f73", "\u1100\u1161\u11a8", "\u1112\u1161",
             "\uac00\u11a8", "\u00c5\u0301", "u\u0308\u0304", "\u0041\u030a\u0301", "\u0345a",
             "\u0301", "\u05d0\u05b7", "\u0928\u093c", "\u0b47\u0b3e", "\u0bc6\u0bbe",
             "\u1025\u102e", "\u3046\u3099", "\u30cf\u309a", "\u00e9", "\u0065\u0327\u0306",
             "\ufb01", "\u2460", "\u00bd", "\u1e0b\u0323", "q\u0307\u0323", "\u0fb2\u0f80",
             "\U0001d15e", "\u2add\u0338", "\u0399\u0308\u0301", "\u1f00\u0345",
             "\u0112\u0300", "\u0627\u0653", "\u0648\u0654", "\u09c7\u09be"]

SPECIALS_QWEN = ["<|im_start|>", "<|im_end|>", "<|endoftext|>", "<think>", "</think>",
                 "<tool_call>", "</tool_call>", "<|fim_prefix|>", "<|vision_start|>",
                 "<|im_start", "im_end|>", "<|", "|>"]
SPECIALS_SPM = ["<s>", "</s>", "<unk>", "<s", "s>"]
SPECIALS_LEGACY = ["[MASK]", "<sep>", "cat", "[b]", "concat", "cat.", " cat ", "[MASK] ",
                   "  <sep>  ", "<s>", "</s>", "DOG", "dog", "Dog", "\uff26\uff29", "fi", "FI"]
SPECIALS_BYTELEVEL = ["<|user|>", "<|user|>  ", " the ", "the", "<s>", "</s>", "<pad>"]

WORDS = ["the", "The", "THE", "hello", "Hello", "world", "I'm", "don't", "you're", "we've",
         "she'll", "they'd", "it's", "IT'S", "O'Neil", "rock'n'roll", "Lily", "park", "once",
         "upon", "a", "time", "little", "girl", "named", "played", "happy", "ball", "tree",
         "naïve", "café", "résumé", "Zürich", "straße", "façade", "coöperate", "jalapeño",
         "über", "Ænima", "İstanbul", "ǅemal", "ﬁnance", "Ⅻ", "x²", "H₂O", "3½", "№5",
         "Москва", "Αθήνα", "東京", "서울", "مرحبا", "שלום", "नमस्ते", "ภาษาไทย", "ქართული"]

CODE = [
    "def f(x):\n    return x * 2\n",
    "for (int i = 0; i < n; ++i) {\n\tsum += a[i];\n}\n",
    "{\"key\": [1, 2.5, -3e10, true, null], \"nested\": {\"a\": \"b\"}}",
    "#include <stdio.h>\nint main(void) { printf(\"%d\\n\", 42); }\n",
    "SELECT id, name FROM users WHERE age >= 18 ORDER BY name;",
    "    if x == y:\n        pass\n    elif x != y:\n        raise ValueError('bad')\n",
    "fn main() -> Result<(), Box<dyn Error>> { let v: Vec<u8> = vec![0xFF; 16]; Ok(()) }",
    "<div class=\"a\">&nbsp;&lt;tag&gt;</div>",
    "x = [i**2 for i in range(10) if i % 3 == 0]  # squares",
    "$ ls -la /usr/bin | grep -E '^-rwx' > out.txt 2>&1",
    "const re = /^(?:[a-z0-9!#$%&'*+/=?^_`{|}~-]+)@example\\.com$/i;",
    "\t\t\treturn;\r\n\t}\r\n}",
    "    \n    \n\n\n",
    "a_b_c__d___e", "camelCaseIdentifier", "snake_case_identifier", "SCREAMING_CASE",
    "http://example.com/path?q=1&r=2#frag", "user@example.com", "192.168.0.1:8080",
]

WHITESPACE = [" ", "  ", "   ", "    ", "\t", "\t\t", "\n", "\n\n", "\r\n", "\r", " \n ",
              "\u00a0", "\u3000", "\u2003", "\u200b", "\u2028", " \t\n", "\u000b", "\u000c",
              "\u0085", "\u200d", "\ufeff"]


def digits(rng):
    k = rng.randint(0, 5)
    if k == 0:
        return str(rng.randint(0, 10 ** rng.randint(1, 25)))
    if k == 1:
        return "%d.%d" % (rng.randint(0, 9999), rng.randint(0, 99999))
    if k == 2:
        return "-%de%d" % (rng.randint(1, 99), rng.randint(1, 30))
    if k == 3:
        return "".join(rng.choice("0123456789") for _ in range(rng.randint(1, 40)))
    if k == 4:
        return "%s%d%s" % (rng.choice(WORDS), rng.randint(0, 999), rng.choice(WORDS))
    return "".join(rng.choice("٠١٢٣٤٥٦٧٨٩०१२३४५६७८९０１２３４５６７８９¹²³⁴½⅓") for _ in range(rng.randint(1, 8)))


def assigned(cp):
    c = chr(cp)
    cat = unicodedata.category(c)
    return cat not in ("Cn", "Cs")


def random_codepoint(rng):
    ranges = [(0x20, 0x7E), (0xA0, 0x24F), (0x250, 0x36F), (0x370, 0x52F), (0x530, 0x8FF),
              (0x900, 0xDFF), (0xE00, 0xFFF), (0x1000, 0x1FFF), (0x2000, 0x2BFF),
              (0x2E80, 0x9FFF), (0xA000, 0xD7FF), (0xF900, 0xFFFD), (0x10000, 0x1FAFF),
              (0x20000, 0x2A6DF), (0xE000, 0xE0FF), (0xE0000, 0xE007F)]
    while True:
        lo, hi = rng.choice(ranges)
        cp = rng.randint(lo, hi)
        if assigned(cp):
            return chr(cp)


def chunk(rng, specials):
    k = rng.randint(0, 13)
    if k == 0:
        name = rng.choice(list(SCRIPTS))
        alpha = SCRIPTS[name]
        words = []
        for _ in range(rng.randint(1, 6)):
            words.append("".join(rng.choice(alpha) for _ in range(rng.randint(1, 9))))
        return rng.choice([" ", "", "  ", "\n"]).join(words)
    if k == 1:
        return " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 8)))
    if k == 2:
        return rng.choice(CODE)
    if k == 3:
        return digits(rng)
    if k == 4:
        return "".join(rng.choice(WHITESPACE) for _ in range(rng.randint(1, 6)))
    if k == 5:
        return rng.choice(specials)
    if k == 6:
        return "".join(rng.choice(NFC_CASES) for _ in range(rng.randint(1, 4)))
    if k == 7:
        return "".join(random_codepoint(rng) for _ in range(rng.randint(1, 12)))
    if k == 8:
        return "".join(rng.choice(SCRIPTS["emoji"]) for _ in range(rng.randint(1, 5)))
    if k == 9:
        return rng.choice(["'s", "'S", "'t", "'re", "'VE", "'m", "'ll", "'d", "'x", "''", "'"]) + \
            rng.choice(["", " ", "s", "abc"])
    if k == 10:
        return rng.choice("!?.,;:") * rng.randint(1, 7)
    if k == 11:
        return rng.choice(WORDS).upper() if rng.random() < 0.5 else rng.choice(WORDS).lower()
    if k == 12:
        return "".join(rng.choice(SCRIPTS["symbols"]) for _ in range(rng.randint(1, 6)))
    return rng.choice(["\u0000", "\u001b[0m", "\u007f", "\ufffd", "\U0010fffd", "\u00ad",
                       "\u200e", "\u034f", "\ufe0f", "\U000e0001"])


def make_strings(seed, n, specials):
    rng = random.Random(seed)
    out = ["", " ", "  ", "\n", "a", "Hello world", " Hello world", "hello  world  ",
           "\u00e9", "e\u0301", "\uac00", "\u1100\u1161"] + specials
    while len(out) < n:
        parts = [chunk(rng, specials) for _ in range(rng.randint(1, 5))]
        sep = rng.choice(["", " ", "", "\n"])
        s = sep.join(parts)
        if len(s) > 300:
            s = s[:300]
        out.append(s)
    return out


def write_refs(path, header, tok, strings, with_raw=True):
    lines = [json.dumps(header, ensure_ascii=False)]
    for s in strings:
        rec = {"t": s}
        enc = tok.encode(s, add_special_tokens=True)
        rec["ids"] = enc.ids
        if with_raw:
            tok.encode_special_tokens = True
            raw = tok.encode(s, add_special_tokens=True).ids
            tok.encode_special_tokens = False
            if raw != enc.ids:
                rec["raw"] = raw
        d = tok.decode(enc.ids, skip_special_tokens=False)
        if d != s:
            rec["d"] = d
        ds = tok.decode(enc.ids, skip_special_tokens=True)
        if ds != d:
            rec["ds"] = ds
        lines.append(json.dumps(rec, ensure_ascii=False, separators=(",", ":")))
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        f.write("\n".join(lines) + "\n")
    print("%s: %d strings, %d bytes" % (path, len(strings), os.path.getsize(path)))


def normalization_refs(path, n):
    rng = random.Random(7)
    marks = [chr(c) for c in list(range(0x300, 0x370)) + [0x5b0, 0x5b4, 0x5bc, 0x93c, 0x94d,
                                                          0x9bc, 0x9cd, 0x1dc0, 0x20d0, 0x302a,
                                                          0x3099, 0x309a, 0x0e48, 0x0f71, 0x0f72]]
    bases = "aeiouAEIOUcnszCNSZ" + "αεηιοωΑΩ" + "аеиоуАЕ" + "\u1100\u1161\u11a8\uac00\u1112" + \
        "\u3046\u30cf\u0915\u09c7\u0b47\u0bc6\u1025\u0627\u0648"
    compat = "\ufb01\ufb02\u2460\u00bd\u00b2\u2126\u212b\u3300\uff21\uff41\u1e9b\u01c4\u01c5\u2163\u33a1\ufe64\u2002\u00a0\u3000\u0132\u0149\u00df\u0130\u03a3"
    out = []
    for i in range(n):
        parts = []
        for _ in range(rng.randint(1, 8)):
            k = rng.random()
            if k < 0.45:
                parts.append(rng.choice(bases) + "".join(rng.choice(marks) for _ in range(rng.randint(0, 4))))
            elif k < 0.6:
                parts.append(rng.choice(compat))
            elif k < 0.7:
                parts.append(rng.choice(NFC_CASES))
            elif k < 0.8:
                parts.append(rng.choice(marks))
            else:
                while True:
                    c = chr(rng.randint(0xA0, 0x2FFFF))
                    if unicodedata.category(c) not in ("Cn", "Cs", "Co"):
                        break
                parts.append(c)
        t = "".join(parts)
        out.append(json.dumps({"t": t, "nfc": unicodedata.normalize("NFC", t),
                               "nfd": unicodedata.normalize("NFD", t),
                               "nfkc": unicodedata.normalize("NFKC", t),
                               "nfkd": unicodedata.normalize("NFKD", t)},
                              ensure_ascii=False, separators=(",", ":")))
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        f.write("\n".join(out) + "\n")
    print("%s: %d strings, Unicode %s" % (path, n, unicodedata.unidata_version))


def gguf_kv_string(key, value):
    return gguf_str(key) + struct.pack("<I", 8) + gguf_str(value)


def gguf_str(x):
    b = x.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


def gguf_from_hf(t, pre, path):
    """A vocab-only GGUF v3 for a byte-level tokenizer.json (tokenizer.ggml.model "gpt2")."""
    pieces = {i: p for p, i in t["model"]["vocab"].items()}
    types = {}
    for a in t["added_tokens"]:
        pieces[a["id"]] = a["content"]
        types[a["id"]] = 3 if a["special"] else 4
    n = max(pieces) + 1
    assert sorted(pieces) == list(range(n))
    merges = [" ".join(m) if isinstance(m, list) else m for m in t["model"]["merges"]]
    kv = [gguf_kv_string("general.architecture", "llama"),
          gguf_kv_string("tokenizer.ggml.model", "gpt2"),
          gguf_kv_string("tokenizer.ggml.pre", pre),
          gguf_str("tokenizer.ggml.tokens") + struct.pack("<IIQ", 9, 8, n) +
          b"".join(gguf_str(pieces[i]) for i in range(n)),
          gguf_str("tokenizer.ggml.token_type") + struct.pack("<IIQ", 9, 5, n) +
          b"".join(struct.pack("<i", types.get(i, 1)) for i in range(n)),
          gguf_str("tokenizer.ggml.merges") + struct.pack("<IIQ", 9, 8, len(merges)) +
          b"".join(gguf_str(m) for m in merges),
          gguf_str("tokenizer.ggml.bos_token_id") + struct.pack("<II", 4, 1),
          gguf_str("tokenizer.ggml.eos_token_id") + struct.pack("<II", 4, 2),
          gguf_str("tokenizer.ggml.add_bos_token") + struct.pack("<IB", 7, 1)]
    with open(path, "wb") as f:
        f.write(b"GGUF" + struct.pack("<IQQ", 3, 0, len(kv)) + b"".join(kv))


def tiny_gguf():
    """A vocab-only GGUF v3 with tokenizer.ggml.model "llama" and a handful of pieces."""
    def gstr(x):
        b = x.encode("utf-8")
        return struct.pack("<Q", len(b)) + b
    pieces = ["<unk>", "<s>", "</s>"] + ["<0x%02X>" % b for b in range(256)] + \
        [SPIECE, "a", "b", "c", "ab", SPIECE + "a", SPIECE + "ab", "abc"]
    types = [2, 3, 3] + [6] * 256 + [1] * 8
    scores = [0.0] * 259 + [-1.0, -2.0, -3.0, -4.0, -5.0, -6.0, -7.0, -8.0]
    kv = []
    kv.append(gstr("tokenizer.ggml.model") + struct.pack("<I", 8) + gstr("llama"))
    kv.append(gstr("tokenizer.ggml.tokens") + struct.pack("<IIQ", 9, 8, len(pieces)) +
              b"".join(gstr(p) for p in pieces))
    kv.append(gstr("tokenizer.ggml.scores") + struct.pack("<IIQ", 9, 6, len(scores)) +
              b"".join(struct.pack("<f", x) for x in scores))
    kv.append(gstr("tokenizer.ggml.token_type") + struct.pack("<IIQ", 9, 5, len(types)) +
              b"".join(struct.pack("<i", x) for x in types))
    kv.append(gstr("tokenizer.ggml.bos_token_id") + struct.pack("<II", 4, 1))
    kv.append(gstr("tokenizer.ggml.add_bos_token") + struct.pack("<IB", 7, 1))
    return b"GGUF" + struct.pack("<IQQ", 3, 0, len(kv)) + b"".join(kv)


def fuzz_corpus(out, tokenizer_files, strings, gguf_files):
    os.makedirs(out, exist_ok=True)
    k = 0
    def w(data):
        nonlocal k
        with open(os.path.join(out, "seed-%03d" % k), "wb") as f:
            f.write(data)
        k += 1
    for path in tokenizer_files:
        w(b"\x00" + open(path, "rb").read())
    for s in strings:
        w(b"\x01" + s.encode("utf-8"))
        w(b"\x02" + s.encode("utf-8"))
    w(b"\x03" + tiny_gguf())
    for path in gguf_files:
        w(b"\x03" + open(path, "rb").read())
    rng = random.Random(5)
    for mode in (4, 12, 20, 28):
        w(bytes([mode]) + b"".join(struct.pack("<i", rng.randint(-5, 700)) for _ in range(40)))


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    repo = os.path.dirname(os.path.dirname(here))
    ap = argparse.ArgumentParser()
    ap.add_argument("--shared", default=os.environ.get("WEFT_SHARED_DIR",
                                                       os.path.join(repo, "..", "shared")))
    ap.add_argument("--out", default=os.path.join(repo, "tests", "data", "tokenizer"))
    ap.add_argument("--qwen", type=int, default=3000)
    ap.add_argument("--small", type=int, default=800)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)

    stories = stories_tokenizer(os.path.join(args.shared, "models", "stories260K", "tok512.bin"))
    legacy = spm_legacy_tokenizer(stories)
    corpus = make_strings(99, 4000, SPECIALS_BYTELEVEL)
    bytelevel = bytelevel_small_tokenizer(corpus)
    llama3 = bytelevel_llama3_tokenizer(bytelevel)
    for name, t in (("stories260K", stories), ("spm_legacy", legacy),
                    ("bytelevel_small", bytelevel), ("bytelevel_llama3", llama3)):
        with open(os.path.join(args.out, name + ".json"), "w", encoding="utf-8") as f:
            json.dump(t, f, ensure_ascii=False, indent=1)
            f.write("\n")
    gguf_from_hf(llama3, "llama-bpe", os.path.join(args.out, "bytelevel_llama3.gguf"))

    qwen_path = os.path.join(args.shared, "models", "qwen3-tokenizer", "tokenizer.json")
    write_refs(os.path.join(args.out, "refs_qwen3.jsonl"),
               {"tokenizer": "shared:models/qwen3-tokenizer/tokenizer.json",
                "tokenizers": __import__("tokenizers").__version__},
               Tokenizer.from_file(qwen_path), make_strings(1, args.qwen, SPECIALS_QWEN))
    for name, seed, specials in (("stories260K", 2, SPECIALS_SPM),
                                 ("spm_legacy", 3, SPECIALS_LEGACY),
                                 ("bytelevel_small", 4, SPECIALS_BYTELEVEL),
                                 ("bytelevel_llama3", 8, SPECIALS_BYTELEVEL)):
        write_refs(os.path.join(args.out, "refs_%s.jsonl" % name),
                   {"tokenizer": "data:%s.json" % name,
                    "tokenizers": __import__("tokenizers").__version__},
                   Tokenizer.from_file(os.path.join(args.out, name + ".json")),
                   make_strings(seed, args.small, specials))
    normalization_refs(os.path.join(args.out, "normalization.jsonl"), 1500)
    fuzz_corpus(os.path.join(repo, "tests", "fuzz", "corpus", "tokenizer"),
                [os.path.join(args.out, n + ".json") for n in ("stories260K", "spm_legacy")],
                make_strings(6, 40, SPECIALS_QWEN + SPECIALS_LEGACY),
                [os.path.join(args.out, "bytelevel_llama3.gguf")])


if __name__ == "__main__":
    sys.exit(main())
