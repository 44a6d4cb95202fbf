"""Which of the "people" a small model lists are names (issue 40 item 4).

On news prose (MSRA, CoNLL-2003: ``benchmarks/redact_ner.py``) a 0.5B model lists phrases, common nouns, roles and
places among the people — 委员们, 深感责任重大, 物质, 学者, 香港, World Cup — and also names with their title
(克林顿总统, 特使格尔巴德, 范瓦伦兄弟). ``listed_name`` takes the title off and says whether what is left has a
name's form; ``redact.split_listing`` takes those as listed and asks about the rest.
"""

from __future__ import annotations

import re

from .pii_names import _EN_NOT_NAME_WORDS, _NOT_NAMES, COMPOUND_SURNAMES, SINGLE_SURNAMES, _is_han

__all__ = ["listed_name", "never_name", "sure_name"]

#: characters of the standard transliterations of foreign names (克林顿, 米尔斯, 巴克尔, 格尔巴德 …)
_TRANSLITERATION = frozenset(
    "阿埃艾安昂奥澳巴拜班邦保鲍贝本比彼宾波伯博布查达戴丹道德登迪蒂丁东杜多顿厄恩尔法范菲费芬丰弗福富盖甘冈戈格"
    "贡古瓜圭哈海汉豪赫亨洪华霍基吉加贾杰捷金卡凯坎康柯科克肯孔库夸奎拉腊莱赖兰朗劳勒雷蕾里利莉丽连林琳卢鲁伦"
    "罗洛马麦曼芒梅门蒙米敏明莫默姆穆纳娜奈南内尼妮努诺帕派潘佩彭皮普奇乔切钦琼丘萨塞桑瑟森沙尚舍什施斯松苏索"
    "塔泰坦汤唐特滕提通托图瓦万旺威韦维温文沃乌西希夏谢辛休雅亚扬耶伊英尤扎泽詹兹茨祖佐夫娃莎琪黛丝伍")
_SEPARATORS = "·•・."
#: characters that are not in a Chinese given name (particles, pronouns, measure words)
_NOT_GIVEN = set("的了们是在这那个吗呢吧啊我你他她它")
#: titles, roles and kin words written before or after a name (总统克林顿, 克林顿总统, 范瓦伦兄弟)
_TITLES = ("总书记", "委员长", "国务卿", "总统", "主席", "总理", "首相", "部长", "大使", "特使", "将军", "书记", "省长",
           "市长", "县长", "局长", "院长", "校长", "经理", "董事长", "总裁", "教授", "博士", "医生", "律师", "老师",
           "记者", "先生", "女士", "小姐", "夫人", "同志", "兄弟", "姐妹", "一家", "等人", "国王", "王子", "公主")
_EN_PARTICLES = frozenset(("de", "da", "di", "van", "von", "der", "den", "du", "la", "le", "bin", "al", "del", "dos"))
_EN_TITLES = re.compile(r"^(?:President|Prime Minister|Minister|Mr|Mrs|Ms|Dr|Prof|Sir|King|Queen|Senator|General|"
                        r"Coach|Captain|Judge)\.?\s+")


#: what joins several names in one listed string (宋健、陈俊生、胡启立; "Bill Clinton and Al Gore")
ENUMERATION = re.compile(r"\s*(?:[、，,;；/&]|\s+and\s+)\s*")


def listed_name(value: str) -> str | None:
    """The name in a string the model listed among the people — its title taken off — when it has a name's form,
    else None."""
    value = value.strip()
    if value.isascii():
        value = _EN_TITLES.sub("", value)
    else:
        changed = True
        while changed:
            changed = False
            for title in _TITLES:
                if len(value) > len(title) + 1 and value.endswith(title):
                    value, changed = value[:-len(title)], True
                if len(value) > len(title) + 1 and value.startswith(title):
                    value, changed = value[len(title):], True
    return value if sure_name(value) else None


def never_name(value: str) -> bool:
    """A listed "person" that cannot be a name, dropped without a question: English with no capitalised word
    (second-seeded, final), or Chinese of more than five characters with no name separator (a phrase:
    日本民间人士参与修复; a name inside it is still found by the surname rules)."""
    value = value.strip()
    if value.isascii():
        return not any(word[:1].isupper() for word in value.split())
    return len(value) > 5 and not any(c in _SEPARATORS for c in value)


def sure_name(value: str) -> bool:
    """A name's form: a Chinese surname with a two-character given name (or a compound surname), a transliterated
    foreign name (克林顿, 格尔巴德, 瓦西里斯·康斯坦塔科普洛斯), a surname with one given character unless the pair is a
    common word (李明, not 金融), or two to four capitalised English words (particles and initials between). One
    English word, a phrase, a title, a place are not sure."""
    value = value.strip()
    if not value:
        return False
    if value.isascii():
        words = value.replace(",", " ").split()
        if not 2 <= len(words) <= 4 or words[0].lower() in _EN_PARTICLES or words[-1].lower() in _EN_PARTICLES:
            return False
        return all(re.fullmatch(r"[A-Z]\.?", w) or w in _EN_PARTICLES
                   or (re.fullmatch(r"[A-Z][a-z'-]+(?:-[A-Z][a-z'-]+)?", w) and w not in _EN_NOT_NAME_WORDS)
                   for w in words)
    if not all(_is_han(c) or c in _SEPARATORS for c in value) or any(c in _NOT_GIVEN for c in value):
        return False
    if value[:2] in COMPOUND_SURNAMES:
        return 3 <= len(value) <= 4
    if any(c in _SEPARATORS for c in value[1:-1]):  # 阿沛·阿旺晋美, 亚历山大·克瓦希涅夫斯基: a foreign or minority name
        return 3 <= len(value) <= 24
    if value[0] in SINGLE_SURNAMES and (len(value) == 3 or (len(value) == 2 and value not in _NOT_NAMES)):
        return True
    letters = [c for c in value if c not in _SEPARATORS]
    return 2 <= len(letters) <= 24 and all(c in _TRANSLITERATION for c in letters)
