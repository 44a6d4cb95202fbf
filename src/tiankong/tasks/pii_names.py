"""Rule candidates for what the model finds — PERSON, ADDRESS, ORG — in Chinese and English text.

A 0.5B model listing names, addresses and organisations misses some (issue 21 row 10: 张伟, 欧阳娜娜, a
Beijing address, a US address). These rules add what has a form:

* ADDRESS (zh): administrative levels (省/自治区/市/州/区/县/旗/镇/乡/街道) and a road with a number
  (路/街/大道/巷/胡同/弄 + 号, then 栋/座/单元/层/室 …), with a six-digit postcode right after; found when it has
  two levels, or one level and a road, or a road with a number.
* ADDRESS (en): house number + street name + street type (Street, Ave., Road …), with unit, town, state and ZIP;
  a "Town, ST 12345" line alone.
* ORG: a name ending in an organisation word (有限公司, 集团, 大学, 银行, 医院 … / Inc., LLC, Ltd, Corp.,
  University of …).
* PERSON (zh): a common surname (the most frequent single ones and the compound ones) with a one- or
  two-character given name. Found when a cue stands next to it (先生/女士/经理/说 … after, 联系人/我叫/收件人 …
  before) or the surname is compound; otherwise a **candidate** the model confirms (``redact.py`` asks a yes/no
  question about it, the text read once) — alone, too many Chinese words start with a surname (周末, 高兴).
* PERSON (en): a title (Mr/Ms/Mrs/Dr/Prof …) with capitalised names; two or three capitalised words in a row are
  candidates the model confirms, as the Chinese surnames are.

Chinese has no spaces, so a Chinese span's left edge is found by walking back from its anchor (the suffix)
over CJK characters that are not function words, at most a bounded number. Every pattern is bounded (no
nested unbounded repetition), so the cost is linear in the text.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from .pii_gazetteer import surname_words
from .pii_rules import Entity, resolve_overlaps

__all__ = ["CONFIRM_AT", "name_candidates", "name_entities", "next_to_cue"]

#: a surname candidate is redacted when the model gives "it is a person's name" at least this probability: low,
#: since redaction fails safe (chosen before measuring; not tuned on the benchmark's set)
CONFIRM_AT = 0.35

SINGLE_SURNAMES = (
    "王李张刘陈杨黄赵吴周徐孙马朱胡郭何林高罗郑梁谢宋唐许韩邓冯曹彭曾肖田董潘袁蔡蒋余于杜叶程魏苏吕丁任卢姚沈"
    "钟姜崔谭陆范汪廖石金韦贾夏付傅方邹熊白孟秦邱侯江尹薛闫段雷龙黎史陶贺毛郝顾龚邵万覃武钱戴严莫孔向常汤康"
    "易乔赖文施洪辛柯庄葛牛邢安齐俞蓝殷左卓詹温宁倪牟申祝包聂单耿关纪焦鲁柏管童凌裴翟甘谷霍颜盛")
COMPOUND_SURNAMES = ("欧阳", "司马", "上官", "诸葛", "东方", "皇甫", "尉迟", "公孙", "慕容", "长孙", "宇文", "司徒",
                     "夏侯", "轩辕", "令狐", "端木", "独孤", "南宫", "西门", "百里", "呼延", "申屠", "太史", "闻人")
#: characters that end a Chinese name or start what follows it (a cue, a particle, punctuation)
_AFTER_NAME = set("先女小老经总主教博医律同师阿叔说表告称的是在和与跟也都已于将要会给对把被让请了"
                  "，。、；：！？ ,.;:!?（(")
_CUES_AFTER = ("先生", "女士", "小姐", "老师", "经理", "总监", "主任", "教授", "博士", "医生", "律师", "同学", "师傅",
               "说", "表示", "告诉", "称", "的电话", "电话", "手机", "本人", "签字", "签名")
_CUES_BEFORE = ("联系人", "收件人", "寄件人", "收货人", "我叫", "我是", "姓名", "名叫", "叫做", "客户", "患者",
                "申请人", "负责人", "经办人", "联系", "致", "亲爱的", "尊敬的", "署名", "户主", "法定代表人",
                "处理人", "签收人", "经手人", "对接人", "发件人", "审批人", "投诉人", "担保人", "代理人", "委托人",
                "持卡人", "开户人", "借款人", "监护人", "被保险人", "报案人")
_NOT_CUES = ("说明", "说法", "说服", "称为", "称号")
#: frequent words that begin with a surname character and are not names (no question asked about them)
_NOT_NAME_PAIRS = (
    "周末周围周年周期周一周二周三周四周五周六周日马上高兴高级高速高度高效方法方面方式方便方案方向任何任务"
    "文件文档文化文字文章程序程度安全安装安排安静金额金融于是万一常见常用常常白天钱包黄色王国张开江湖高手"
    "向上向下关于关系关闭关注管理单位单独包括包裹申请申报齐全宁可温度简单龙头易用康复严重毛病段落雷达史上"
    "顾客孔子石头田地白色金色万元乔迁洪水齐心牛奶甘心谷歌盛大童年凌晨焦虑鲁莽纪律霍乱颜色邢台蓝色殷切卓越"
    "詹姆倪匡祝贺祝您聂卫耿直柏林裴多翟志何时何处何况林业高中高考朱红胡同郭外罗马郑重梁上谢谢宋体唐朝许多"
    "许可韩国邓小冯巩曹操彭湃曾经肖像董事潘多袁隆蔡伦蒋介余额余下杜绝叶子魏晋苏州吕梁丁点卢布姚明沈阳钟表"
    "钟头姜汤崔健谭咏陆续陆地范围汪洋廖化韦编贾宝夏天夏季付款付费傅里邹平熊猫孟子秦朝邱少侯爵江西江苏尹天"
    "薛定闫妮黎明陶瓷贺卡郝运龚琳邵阳覃氏武汉武器戴上莫非常州汤圆康乃乔木赖皮施工辛苦柯南庄园葛优安徽俞敏"
    "左右左边温州宁波申通包含单价关键纪念焦点鲁迅管道甘肃谷物霍金颜值盛夏王牌李子刘海陈述陈列杨树赵州吴江"
    "徐州孙子朱砂胡说林立高层罗列郑州梁柱谢绝唐山许昌韩寒曹县彭城肖邦田野董卓潘安袁州蔡司蒋村余杭于都杜甫"
    "叶片魏国苏打吕布丁香任意卢沟姚家沈默石家贾府方圆邹城白云孟买秦岭邱县侯门江南尹氏薛家段子雷雨龙岗黎巴"
    "史料陶器贺兰毛巾郝家顾问龚自邵东覃塘钱塘戴维严格莫斯孔雀向日常规汤姆康熙易经乔丹赖床文明施肥洪亮辛亥"
    "柯达庄严葛洲牛顿邢州齐鲁俞家蓝天殷商左侧卓别詹天温暖宁静倪家牟利申明祝福包装聂耳单身耿耿关心纪元焦作"
    "鲁班柏树管家童话凌空裴家翟家甘蔗谷底霍去颜料盛开"
)
_NOT_NAMES = frozenset(_NOT_NAME_PAIRS[i:i + 2] for i in range(0, len(_NOT_NAME_PAIRS), 2))

_ZH_LEVEL = re.compile(r"(?:特别行政区|自治区|自治州|自治县|省|市|地区|州|盟|区|县|旗|镇|乡|街道)")
_ZH_ROAD = re.compile(r"(?:大道|大街|胡同|路|街|巷|弄|里)(?P<number>(?:[0-9０-９]{1,5}|[一二三四五六七八九十百]{1,4})"
                      r"(?:号院|号)?)?")
_ZH_UNIT = re.compile(r"(?:[0-9０-９A-Za-z一二三四五六七八九十-]{1,6}(?:号楼|栋|幢|座|单元|层|楼|室|号|户))+")
_ZH_BUILDING = re.compile(r"[A-Za-z0-9\u4e00-\u9fff]{1,10}?(?:大厦|中心|广场|花园|小区|公寓|大楼|商城|写字楼|"
                          r"现代城|新城|苑|园|院|城)")
_ZH_POSTCODE = re.compile(r"\s?[1-9][0-9]{5}(?![0-9])")
PROVINCES = ("北京", "天津", "上海", "重庆", "河北", "山西", "辽宁", "吉林", "黑龙江", "江苏", "浙江", "安徽", "福建",
             "江西", "山东", "河南", "湖北", "湖南", "广东", "海南", "四川", "贵州", "云南", "陕西", "甘肃", "青海",
             "台湾", "内蒙古", "广西", "西藏", "宁夏", "新疆", "香港", "澳门")
#: characters a Chinese name or place is not made of: function words, pronouns, common verbs before a place
_ZH_STOP = set("我你他她它们的是在于从向和与跟给对为了到去来住址寄送发往位叫称将把被让请由经过及或并且也都就还又再已"
               "曾很最更每各该此这那其之以即吗呢吧啊呀哦嗯个")
_ORG_STOP = _ZH_STOP - set("来发开向")  # 晖来计算机, 开发区世创: verbs that are also in company names
_IN_PLACE_STOP = set("我你他她它们的是在了吗呢吧啊呀")
#: a conjunction needs a word on its left to join: after punctuation, the start or a function word it is a name's
#: first character (和泰信息有限公司 lost its 和 on the generated sets of seeds 11 and 23)
_CONJUNCTIONS = set("和与及")
#: what cannot be the left word of a conjunction: function words but pronouns (我们和ABC公司: "we and"), and verbs
#: of saying (说和泰信息有限公司)
_NOT_CONJUNCT = (_ZH_STOP - set("我你他她它们这那其之此该各每个")) | set("说称问诉")


def _is_han(char: str) -> bool:
    return "\u4e00" <= char <= "\u9fff"


def _walk_left(text: str, end: int, limit: int, stop: set[str] | None = None, ascii_ok: bool = False) -> int:
    """Start of the CJK run ending at ``end`` (at most ``limit`` characters, stopping at a function word; with
    ``ascii_ok`` ASCII letters and digits belong to the run too: MBP软件有限公司)."""
    stop = _ZH_STOP if stop is None else stop
    start = end
    while start > 0 and end - start < limit:
        char = text[start - 1]
        if not (_is_han(char) or (ascii_ok and char.isascii() and char.isalnum())) or char in stop:
            break
        start -= 1
    return start


# --- addresses -------------------------------------------------------------------------------------------------


def _zh_piece(text: str, cursor: int, stop: set[str], first: bool) -> tuple[str, int, bool] | None:
    """The place piece at ``cursor``: 1–8 name characters (the fewest that work), then an administrative level
    (and any level right after it: 州市) or a road (with its number; 兰州路 and 兴安盟街 are roads whose name ends
    in a level word). A run's first level needs a name of two characters or more (地区 alone is no place).
    (kind, end, numbered)."""
    for width in range(1, 9):
        at = cursor + width
        if at >= len(text) or not _is_han(text[at - 1]) or text[at - 1] in stop:
            return None
        level = _ZH_LEVEL.match(text, at)
        if level and not (first and width < 2):
            end = level.end()
            while (more := _ZH_LEVEL.match(text, end)) is not None:
                end = more.end()
            road = _ZH_ROAD.match(text, end)
            if road:
                return "road", road.end(), bool(road.group("number"))
            return "level", end, False
        road = _ZH_ROAD.match(text, at)
        if road:
            return "road", road.end(), bool(road.group("number"))
    return None


def _zh_addresses(text: str) -> Iterator[tuple[int, int]]:
    """Runs of administrative levels and roads (then building, unit, postcode): two levels, a level and a road, or
    a road with its number. A run starts after a function word or punctuation, or at a province's name."""
    position = 0
    while position < len(text):
        char = text[position]
        starts_here = _is_han(char) and char not in _ZH_STOP and (
            position == 0 or not _is_han(text[position - 1]) or text[position - 1] in _ZH_STOP
            or text.startswith(PROVINCES, position))
        if not starts_here:
            position += 1
            continue
        cursor, levels, roads, numbered = position, 0, 0, False
        first_end = None
        # the first piece's name stops at any function word; later ones (inside a run of places) only at the
        # few that cannot be in a place name (和平路, 向阳街, 于洪区 are places)
        while (piece := _zh_piece(text, cursor, _ZH_STOP if first_end is None else _IN_PLACE_STOP,
                                  first_end is None)) is not None:
            kind, cursor, has_number = piece
            first_end = cursor if first_end is None else first_end
            levels += kind == "level"
            roads += kind == "road"
            numbered = numbered or has_number
        if levels >= 2 or (levels and roads) or (roads and numbered):
            end = cursor
            for tail in (_ZH_BUILDING, _ZH_UNIT, _ZH_POSTCODE):
                found = tail.match(text, end)
                if found and not (tail is _ZH_BUILDING and any(c in _ZH_STOP for c in found.group())):
                    end = found.end()
            start = position
            for province in PROVINCES:  # 发货地湖南省…: the place starts at the province (within the first piece)
                at = text.find(province, position, first_end)
                if position < at:
                    start = at
                    break
            yield start, end
            position = end
        else:
            position += 1


_STREET_TYPES = ("Street|St|Avenue|Ave|Road|Rd|Boulevard|Blvd|Lane|Ln|Drive|Dr|Court|Ct|Way|Place|Pl|Terrace|Ter|"
                 "Circle|Cir|Parkway|Pkwy|Highway|Hwy|Square|Sq|Trail|Trl|Crescent|Close|Row|Alley|Loop|Path|Pike|"
                 "Plaza|Ridge|Run|Walk|Point|Heights|Park|Grove|Hill|Hills|Lake|Lakes|Landing|Meadows?|Mills?|"
                 "Mount|Pass|Port|Ports|Springs?|Station|Summit|Valley|View|Village|Vista|Crossing|Expressway|"
                 "Freeway|Gardens?|Harbor|Haven|Island|Junction|Manor|Motorway|Orchard|Pines|Shores?|Stream|"
                 "Turnpike|Viaduct|Wells?|Ways?|Fork|Forks|Ford|Falls|Flats?|Ferry|Field|Fields|Creek|Cove|Courts|"
                 "Common|Cliffs?|Center|Camp|Canyon|Cape|Causeway|Brook|Bridge|Bypass|Burg|Branch|Bluffs?|Bend|"
                 "Bay|Beach|Estates?|Extension|Glen|Green|Knolls?|Lodge|Mall|Mission|Neck|Oval|Pointe|Prairie|"
                 "Radial|Ranch|Rapids?|Rest|Route|Shoal|Spur|Stravenue|Throughway|Trace|Track|Trafficway|Tunnel|"
                 "Underpass|Union|Vale|Ville|Wall|Inlet|Isle|Lock|Loaf|Mews|Overpass|Plain|Ramp|Skyway|Annex|Arcade|Bottom|"
                 "Curve|Dale|Dam|Divide|Gateway|Gateways|Garden|Hollow|Light|Mountain|Pine|Plains|Ridges|Rue|"
                 "Shoals|Squares|Trails|Views|Villages|Villas|Vistas|Walks|Crest|Corner|Corners|Meadow|Mill")
_EN_STREET = re.compile(
    r"(?<![\w-])\d{1,6}[A-Za-z]?\s+(?:[NSEW]\.?\s+)?(?:[A-Z][A-Za-z'.-]{0,40}\s+){1,4}"
    rf"(?:{_STREET_TYPES})s?\.?(?![A-Za-z])"
    r"(?:,?\s+(?:Apt\.?|Suite|Ste\.?|Unit|Floor|Fl\.?|Room|Rm\.?|#)\s*[\w-]{1,8})?")
_EN_TOWN = re.compile(r"(?<![\w-])[A-Z][A-Za-z'.-]{1,40}(?:\s+[A-Z][A-Za-z'.-]{1,40}){0,3},?\s+[A-Z]{2}\s+\d{5}"
                      r"(?:-\d{4})?(?!\d)")
_EN_BOX = re.compile(r"(?<![\w-])(?:P\.?\s?O\.?\s+Box|PSC|Unit|USNS|USNV|USS|USCGC)\s+[\w]{1,40}"
                     r"(?:,?\s+Box\s+\d{1,6})?(?:,?\s+(?:APO|FPO|DPO)\s+A[AEP]\s+\d{5})?")
#: a street line in any naming (USPS has ~200 street types) right before a "Town, ST 12345" line
_EN_LINE_BEFORE_TOWN = re.compile(r"(?<![\w-])\d{1,6}[A-Za-z]?\s+(?:[A-Z][A-Za-z'.-]{0,40}\s+){0,3}"
                                  r"[A-Z][A-Za-z'.-]{0,40}(?:,?\s+(?:Apt\.?|Suite|Ste\.?|Unit|Floor|Fl\.?|Room|"
                                  r"Rm\.?|#)\s*[\w-]{1,8})?,?\s+$")


def _en_addresses(text: str) -> Iterator[tuple[int, int]]:
    spans = [(m.start(), m.end()) for pattern in (_EN_STREET, _EN_TOWN) for m in pattern.finditer(text)]
    for town in _EN_TOWN.finditer(text):
        window = max(0, town.start() - 120)
        line = _EN_LINE_BEFORE_TOWN.search(text, window, town.start())
        if line:
            spans.append((line.start(), town.end()))
    spans += [(m.start(), m.end()) for m in _EN_BOX.finditer(text) if re.search(r"\d", m.group())
              and re.search(r"Box|APO|FPO|DPO", m.group())]
    yield from _joined(text, spans)


def _joined(text: str, spans: list[tuple[int, int]]) -> Iterator[tuple[int, int]]:
    """Adjacent spans separated only by a comma, spaces or a newline become one (street, then town)."""
    merged: list[list[int]] = []
    for start, end in sorted(spans):
        if merged and (start <= merged[-1][1] or not text[merged[-1][1]:start].strip(" ,\n\t")):
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    for start, end in merged:
        yield start, end


# --- organisations -------------------------------------------------------------------------------------------

_ZH_ORG = re.compile(r"(?:股份有限公司|有限责任公司|有限公司|集团|公司|银行|大学|学院|医院|研究院|研究所|事务所|"
                     r"委员会|协会|基金会|出版社|报社|电视台|合作社|工作室|幼儿园|中学|小学|法院|检察院|派出所)")
_EN_ORG = re.compile(
    r"(?<![\w-])(?:[A-Z][A-Za-z&'.-]{0,40}(?:,?\s+(?:and|&)\s+|,\s+|\s+|-)){0,4}?[A-Z][A-Za-z&'.-]{0,40},?\s+"
    r"(?:Inc|LLC|L\.L\.C|Ltd|Limited|Corp|Corporation|Co|Company|Group|GmbH|PLC|LLP|LP|AG|SA|Holdings|Partners|"
    r"Associates|Foundation|Bank|Hospital|Institute|Labs?|Technologies|Systems|Solutions|Ventures|Industries)"
    r"\.?(?![A-Za-z])"
    r"|(?<![\w-])(?:University|College|Institute|Bank|Ministry|Department|Museum)\s+of\s+(?:the\s+)?"
    r"[A-Z][A-Za-z'-]{1,40}(?:\s+[A-Z][A-Za-z'-]{1,40}){0,3}")


def _orgs(text: str) -> Iterator[tuple[int, int]]:
    for match in _ZH_ORG.finditer(text):
        start = _walk_left(text, match.start(), 14, _ORG_STOP, ascii_ok=True)
        if start > 0 and text[start - 1] in _CONJUNCTIONS and (start == 1 or not _is_han(text[start - 2])
                                                                or text[start - 2] in _NOT_CONJUNCT):
            start -= 1  # 和 with nothing to join on its left (，和泰信息有限公司; 由和泰…; 说和泰…) begins the name
        if match.start() - start >= 2:
            yield start, match.end()
    for match in _EN_ORG.finditer(text):
        yield match.start(), match.end()


# --- persons -----------------------------------------------------------------------------------------------------

_TITLE = re.compile(r"(?<![\w-])(?:Mr|Mrs|Ms|Miss|Mx|Dr|Prof|Sir|Dame|Madam)\.?\s+"
                    r"[A-Z][a-z'-]{1,40}(?:\s+[A-Z]\.)?(?:\s+[A-Z][a-z'-]{1,40}){0,2}"
                    r"(?:,?\s+(?:Jr|Sr|II|III|IV|MD|PhD|DDS|DVM)\.?(?![A-Za-z]))?")
_SIGNED = re.compile(r"(?:(?<=\n)|(?<=^)|(?<=Regards,\s)|(?<=Thanks,\s)|(?<=Sincerely,\s)|(?<=Best,\s))"
                     r"[A-Z][a-z'-]{1,40}\s+[A-Z][a-z'-]{1,40}(?=\s*$)", re.M)


def _zh_persons(text: str) -> Iterator[tuple[int, int, bool]]:
    """(start, end, sure): surname + given name; sure when a cue is next to it or the surname is compound."""
    index = 0
    while index < len(text):
        compound = text[index:index + 2] in COMPOUND_SURNAMES
        if not compound and text[index] not in SINGLE_SURNAMES:
            index += 1
            continue
        family = 2 if compound else 1
        given = 0
        while given < 2 and index + family + given < len(text):
            char = text[index + family + given]
            if not ("\u4e00" <= char <= "\u9fff") or (given >= 1 and char in _AFTER_NAME) or char in _ZH_STOP:
                break
            given += 1
        if given == 0:
            index += 1
            continue
        end = index + family + given
        name = text[index:end]
        sure = compound or _cue_before(text, index) or _cue_after(text, end)
        if not sure and given == 2 and _cue_after(text, end - 1):
            end -= 1  # 张伟说: the cue took the name's last place
            name, sure = text[index:end], True
        if sure or (name not in _NOT_NAMES and name[:2] not in _NOT_NAMES):
            yield index, end, sure
        index = end


def _cue_after(text: str, end: int) -> bool:
    return text.startswith(_CUES_AFTER, end) and not text.startswith(_NOT_CUES, end)


def _cue_before(text: str, index: int) -> bool:
    before = text[max(0, index - 6):index].rstrip(" ：:，,")
    return before.endswith(_CUES_BEFORE)


def next_to_cue(text: str, start: int, end: int) -> bool:
    """``text[start:end]`` has a name's cue next to it (联系人：…, …先生, …说)."""
    return _cue_before(text, start) or _cue_after(text, end)


# --- entry points ------------------------------------------------------------------------------------------------


def name_entities(text: str) -> list[Entity]:
    """The addresses, organisations and persons the rules are sure of (non-overlapping, in text order)."""
    found = [Entity(s, e, "ADDRESS", text[s:e], "rule", 0.9) for s, e in (*_zh_addresses(text), *_en_addresses(text))]
    found += [Entity(s, e, "ORG", text[s:e], "rule", 0.85) for s, e in _orgs(text)]
    found += [Entity(s, e, "PERSON", text[s:e], "rule", 0.9) for s, e, sure in _zh_persons(text) if sure]
    found += [Entity(m.start(), m.end(), "PERSON", m.group(), "rule", 0.9)
              for pattern in (_TITLE, _SIGNED) for m in pattern.finditer(text)]
    return resolve_overlaps(e for e in found if e.end > e.start)


#: two or three capitalised words (an initial may stand between them): an English name, or a sentence's first word
#: and a name ("Yesterday Tony Wallace"), or neither — the model decides
_EN_CAPITALISED = re.compile(r"(?<![\w'-])[A-Z][a-z'-]{1,40}(?:\s(?:[A-Z]\.\s)?[A-Z][a-z'-]{1,40}){1,2}(?![\w'-])")
#: words that start a sentence or a clause, and words of places, events and institutions (issue 40: "Only
#: Russia", "World Cup", "Notts County", "Far East" on CoNLL-2003's dev sentences)
_EN_CONTEXT_WORDS = (
    "In", "On", "At", "For", "From", "After", "Before", "When", "While", "If", "As", "But", "And", "Or", "So",
    "Only", "Former", "Next", "Top", "Last", "First", "Two", "Three", "Four", "Five", "North", "South", "East",
    "West", "Northern", "Southern", "Eastern", "Western", "Central", "Far", "Near", "New", "San", "Los", "Las",
    "Santa", "Saint", "St", "Fort", "Port", "Mount", "Lake", "River", "Island", "Bay", "United", "States", "Kingdom",
    "Republic", "Union", "National", "International", "World", "Cup", "Open", "League", "Series", "Championship",
    "City", "County", "State", "Department", "Ministry", "Council", "Party", "Army", "Police", "Government",
    "President", "Minister", "Prime", "King", "Queen", "Prince", "Club", "Stock", "Exchange", "Market", "News",
    "Agency", "Office", "Day", "Week", "Year", "Night", "Morning", "Evening", "Christmas", "Easter", "American",
    "British", "Russian", "Chinese", "French", "German", "Japanese",
)
_EN_NOT_NAME_WORDS = frozenset((
    "Hi", "Hello", "Dear", "Thanks", "Thank", "Please", "Regards", "Best", "Sincerely", "Yes", "No", "The", "This",
    "That", "These", "Those", "We", "Our", "Your", "My", "His", "Her", "Their", "It", "Its", "Monday", "Tuesday",
    "Wednesday", "Thursday", "Friday", "Saturday", "Sunday", "January", "February", "March", "April", "May",
    "June", "July", "August", "September", "October", "November", "December", "Street", "Avenue", "Road", "Inc",
    "LLC", "Ltd", "Corp", "Company", "Group", "University", "Bank", "Team", "Meeting", "Notes", "Customer",
    "Return", "Request", "Record", "Update", "Mr", "Mrs", "Ms", "Dr", "Prof",
    *_EN_CONTEXT_WORDS,
))


_EN_INITIAL_NAME = re.compile(r"(?<![\w.])[A-Z]\.\s?[A-Z][a-z'-]{1,40}(?![\w'-])")


def _en_candidates(text: str) -> Iterator[tuple[int, int]]:
    """Capitalised word runs; a run of three also as its two-word ends (the first word may start the sentence);
    an initial and a surname ("R. Ponting")."""
    for match in _EN_INITIAL_NAME.finditer(text):
        if match.group()[2:].strip() not in _EN_NOT_NAME_WORDS:
            yield match.start(), match.end()
    for match in _EN_CAPITALISED.finditer(text):
        words = [(m.start() + match.start(), m.end() + match.start()) for m in re.finditer(r"\S+", match.group())
                 if not re.fullmatch(r"[A-Z]\.", m.group())]  # initials stay inside the spans, never at an end
        spans = [(words[0][0], words[-1][1])]
        if len(words) == 3:
            spans += [(words[1][0], words[2][1]), (words[0][0], words[1][1])]
        for start, end in spans:
            names = text[start:end].replace(".", "").split()
            if names and not any(word in _EN_NOT_NAME_WORDS for word in names):
                yield start, end


def name_candidates(text: str) -> list[Entity]:
    """Spans that may be a person's name, to be confirmed by the model: a Chinese surname + given name with no cue
    (where the name may have one given character or two — 戴玲反馈: 戴玲 or 戴玲反? — both), and English runs of
    capitalised words, and a lone capitalised word that is a known surname (``pii_gazetteer.surname_words``)."""
    found = [Entity(s, e, "PERSON", text[s:e], "rule", 0.5) for s, e in _en_candidates(text)]
    found += [Entity(s, e, "PERSON", text[s:e], "rule", 0.5) for s, e in surname_words(text)
              if all(e <= f.start or s >= f.end for f in found)]
    for start, end, sure in _zh_persons(text):
        if sure:
            continue
        found.append(Entity(start, end, "PERSON", text[start:end], "rule", 0.5))
        two = text[start:start + 2]
        if end - start == 3 and two not in COMPOUND_SURNAMES and two not in _NOT_NAMES:
            found.append(Entity(start, end - 1, "PERSON", text[start:end - 1], "rule", 0.5))
    return found

