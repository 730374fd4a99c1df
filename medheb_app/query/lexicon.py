"""The query parser's lexicon: finding phrases, concepts per vocabulary, logic cues, the
structures a report calls normal, and stop words.

Phrase lists follow the CheXpert labeler's mention lists where it has one (Irvin et al. 2019),
plus the abbreviations radiologists type (PTX, PNA, CHF, CM, fx). Data only; the grammar that
uses it lives in parser.py.
"""

from __future__ import annotations

from typing import Literal, NamedTuple

# Phrase -> CheXpert concepts it names. Longest phrase wins, so "airspace consolidation" is
# Consolidation while "airspace opacity" is Lung Opacity and "nodular opacity" is Lung Lesion.
FINDING_PHRASES: dict[str, tuple[str, ...]] = {}


def _add(concept: str | tuple[str, ...], *phrases: str) -> None:
    concepts = (concept,) if isinstance(concept, str) else concept
    for phrase in phrases:
        FINDING_PHRASES[phrase] = concepts


_add(
    "Atelectasis",
    "atelectasis",
    "atelectases",
    "atelectatic",
    "atx",
    "collapse",
    "lung collapse",
    "lobar collapse",
    "lobe collapse",
    "volume loss",
    "plate atelectasis",
    "discoid atelectasis",
    "subsegmental atelectasis",
)
_add(
    "Cardiomegaly",
    "cardiomegaly",
    "cardiac enlargement",
    "heart enlargement",
    "enlarged heart",
    "enlarged cardiac silhouette",
    "cardiac silhouette enlarged",
    "heart enlarged",
    "heart is enlarged",
    "enlarged heart size",
    "big heart",
    "heart is large",
    "heart size is large",
    "cardiac silhouette is large",
    "large heart",
    "cm",
)
_add(
    "Consolidation",
    "consolidation",
    "consolidations",
    "consolidated",
    "consolidative",
    "airspace consolidation",
    "air space consolidation",
    "lobar consolidation",
)
_add(
    "Edema",
    "edema",
    "oedema",
    "edematous",
    "pulmonary edema",
    "pulmonary oedema",
    "interstitial edema",
    "interstitial oedema",
    "alveolar edema",
    "alveolar oedema",
    "chf",
    "heart failure",
    "congestive heart failure",
    "fluid overload",
    "vascular congestion",
    "pulmonary vascular congestion",
    "pulmonary congestion",
    # CheXpert's Edema mentions include vascular prominence; as radiologists write it
    "vascular prominence",
    "pulmonary vascular prominence",
    "prominent vasculature",
    "prominent pulmonary vasculature",
    "prominence of the central vasculature",
    "prominence of the pulmonary vasculature",
    "prominent lung vascularity",
    "prominent pulmonary vascularity",
    "kerley lines",
    "kerley b lines",
    "bat wing",
    "batwing",
)
_add(
    "Fracture",
    "fracture",
    "fractures",
    "fractured",
    "fractured rib",
    "fractured ribs",
    "broken rib",
    "broken ribs",
    "broken bone",
    "rib fracture",
    "rib fractures",
    "fx",
    "fxs",
)
_add(
    "Nodule",
    "nodule",
    "nodules",
    "nodular opacity",
    "nodular opacities",
    "nodular density",
    "pulmonary nodule",
    "pulmonary nodules",
    "lung nodule",
    "lung nodules",
    "spn",
    "coin lesion",
    "granuloma",
    "granulomas",
)
_add(
    "Mass",
    "mass",
    "masses",
    "lung mass",
    "pulmonary mass",
    "hilar mass",
    "mediastinal mass",
)
_add(
    "Lung Lesion",
    "lung lesion",
    "lung lesions",
    "lesion",
    "lesions",
    "pulmonary lesion",
    "tumor",
    "tumour",
    "neoplasm",
    "carcinoma",
    "lung cancer",
    "cancer",
    "malignancy",
    "metastasis",
    "metastases",
    "mets",
)
_add(
    "Lung Opacity",
    "lung opacity",
    "lung opacities",
    "opacity",
    "opacities",
    "opacification",
    "airspace opacity",
    "air space opacity",
    "airspace disease",
    "air space disease",
    "airspace opacities",
    "ground glass",
    "ground glass opacity",
    "ggo",
    "haziness",
    "hazy opacity",
    "density",
    "densities",
)
_add("Infiltration", "infiltrate", "infiltrates", "infiltration", "infiltrations", "infiltrative")
_add(
    "Pleural Effusion",
    "pleural effusion",
    "pleural effusions",
    "effusion",
    "effusions",
    "pleural fluid",
    "fluid in the pleural space",
    "hydrothorax",
    "blunted costophrenic angle",
    "blunting of the costophrenic angle",
    "costophrenic angle blunting",
    "layering fluid",
    "fluid layering",
)
_add(
    "Pneumonia",
    "pneumonia",
    "pneumonias",
    "pna",
    "bronchopneumonia",
    "infection",
    "infectious process",
    "lobar pneumonia",
)
_add(
    "Pneumothorax",
    "pneumothorax",
    "pneumothoraces",
    "pneumothoraxes",
    "ptx",
    "collapsed lung",
    "tension pneumothorax",
    "air in the pleural space",
)
_add(("Pleural Effusion", "Pneumothorax"), "hydropneumothorax", "hydro pneumothorax")
# CheXpert concepts outside the CXR-Retrieve ten: recognised, so that they can be reported as
# out of vocabulary instead of vanishing into "unknown".
_add(
    "Support Devices",
    "support device",
    "support devices",
    "lines and tubes",
    "tubes and lines",
    "lines tubes",
    "tube",
    "tubes",
    "line",
    "lines",
    "catheter",
    "catheters",
    "pacemaker",
    "pacer",
    "aicd",
    "icd",
    "defibrillator",
    "device",
    "devices",
    "ett",
    "et tube",
    "endotracheal tube",
    "tracheostomy",
    "tracheostomy tube",
    "ng tube",
    "ngt",
    "og tube",
    "nasogastric tube",
    "feeding tube",
    "dobhoff",
    "chest tube",
    "chest tubes",
    "picc",
    "picc line",
    "central line",
    "central venous catheter",
    "cvc",
    "swan ganz",
    "port",
    "port a cath",
    "sternotomy wires",
    "surgical clips",
    "hardware",
)
_add(
    "Enlarged Cardiomediastinum",
    "enlarged cardiomediastinum",
    "enlarged cardiomediastinal silhouette",
    "cardiomediastinal enlargement",
    "widened mediastinum",
    "mediastinal widening",
    "enlarged mediastinum",
    "mediastinal enlargement",
)
_add(
    "Pleural Thickening",
    "pleural thickening",
    "thickened pleura",
    "pleural scarring",
    "apical pleural thickening",
    "apical capping",
)
_add("Pleural Plaque", "pleural plaque", "pleural plaques", "calcified pleural plaques")
_add("Pleural Other", "pleural other", "fibrothorax")
# NIH ChestX-ray14 findings outside CheXpert.
_add("Emphysema", "emphysema", "emphysematous", "copd", "bullae", "bullous disease")
_add("Fibrosis", "fibrosis", "fibrotic", "pulmonary fibrosis", "interstitial fibrosis", "ipf")
_add(
    "Hernia",
    "hernia",
    "hiatal hernia",
    "hiatus hernia",
    "diaphragmatic hernia",
    "hernias",
)

# Concept -> the vocabulary names that express it, tried in order; the first one the
# vocabulary has wins. So "effusion" is "Pleural Effusion" over CheXpert and "Effusion" over
# NIH, and "mass" is "Mass" over NIH but "Lung Lesion" over CheXpert.
CONCEPT_TARGETS: dict[str, tuple[str, ...]] = {
    "Pleural Effusion": ("Pleural Effusion", "Effusion"),
    "Mass": ("Mass", "Lung Lesion"),
    "Nodule": ("Nodule", "Lung Lesion"),
    "Infiltration": ("Infiltration", "Lung Opacity"),
    "Lung Opacity": ("Lung Opacity", "Infiltration"),
    "Pleural Thickening": ("Pleural Thickening", "Pleural Other"),
    "Pleural Plaque": ("Pleural Plaque", "Pleural Other"),
}
# Concept -> names that together cover it where the vocabulary lacks the concept itself
# ("lesion" over NIH is Mass OR Nodule): excluding it excludes all of them, requiring it is
# not expressible as a conjunction, so it is only reported.
ANY_OF: dict[str, tuple[str, ...]] = {"Lung Lesion": ("Mass", "Nodule")}

# Anatomical structures a radiologist declares normal ("heart size is normal", "lungs are
# clear"): structure phrase -> the concepts that statement excludes.
_HEART = ("Cardiomegaly",)
_MEDIASTINUM = ("Enlarged Cardiomediastinum",)
_LUNGS = ("Lung Opacity", "Infiltration", "Consolidation", "Pneumonia", "Edema", "Atelectasis")
_PLEURA = ("Pleural Effusion", "Pneumothorax", "Pleural Thickening", "Pleural Other")
STRUCTURES: dict[str, tuple[str, ...]] = {}
for _phrase in (
    "heart",
    "heart size",
    "cardiac size",
    "size of the heart",
    "cardiac silhouette",
    "cardiac contour",
    "cardiac contours",
    "cardiac shadow",
    "heart shadow",
):
    STRUCTURES[_phrase] = _HEART
for _phrase in (
    "cardiomediastinal silhouette",
    "cardiomediastinal contour",
    "cardiomediastinal contours",
    "cardiomediastinal",
    "heart and mediastinum",
    "cardiac and mediastinal contours",
    "mediastinal and cardiac contours",
):
    STRUCTURES[_phrase] = _HEART + _MEDIASTINUM
for _phrase in (
    "mediastinum",
    "mediastinal contour",
    "mediastinal contours",
    "mediastinal silhouette",
    "mediastinal width",
    "superior mediastinum",
):
    STRUCTURES[_phrase] = _MEDIASTINUM
for _phrase in ("lungs", "lung", "lung fields", "lung parenchyma", "lung zones", "both lungs"):
    STRUCTURES[_phrase] = _LUNGS
for _phrase in ("pleura", "pleural space", "pleural spaces", "pleural surfaces"):
    STRUCTURES[_phrase] = _PLEURA
for _phrase in (
    "costophrenic angle",
    "costophrenic angles",
    "cp angle",
    "cp angles",
    "costophrenic sulci",
    "costophrenic recesses",
):
    STRUCTURES[_phrase] = ("Pleural Effusion",)
for _phrase in (
    "bones",
    "osseous structures",
    "bony structures",
    "visualized osseous structures",
    "bony thorax",
    "ribs",
    "skeleton",
):
    STRUCTURES[_phrase] = ("Fracture",)
for _phrase in ("hila", "hilum", "hilar contours", "pulmonary vasculature", "diaphragm"):
    STRUCTURES[_phrase] = ()
# What "enlarged" / "widened" after a structure asserts ("heart size is enlarged").
STRUCTURE_ENLARGED: dict[tuple[str, ...], tuple[str, ...]] = {
    _HEART: ("Cardiomegaly",),
    _HEART + _MEDIASTINUM: (
        "Enlarged Cardiomediastinum",
    ),  # as "enlarged cardiomediastinal silhouette"
    _MEDIASTINUM: ("Enlarged Cardiomediastinum",),
    ("Pleural Effusion",): ("Pleural Effusion",),  # blunted costophrenic angles
}

# Phrases naming a group of findings, meaningful only when negated ("no acute
# cardiopulmonary process"): phrase -> the concepts the negation excludes. Deliberately
# narrow: cardiomegaly, lesions and fractures are not "acute cardiopulmonary" findings
# ("Stable cardiomegaly. No acute cardiopulmonary process." keeps Cardiomegaly required).
ACUTE_CARDIOPULMONARY = (*_LUNGS, "Pleural Effusion", "Pneumothorax")
GROUPS: dict[str, tuple[str, ...]] = {}
for _head in ("cardiopulmonary", "intrathoracic", "cardiopulmonary intrathoracic"):
    for _tail in (
        "process",
        "processes",
        "abnormality",
        "abnormalities",
        "disease",
        "pathology",
        "finding",
        "findings",
    ):
        GROUPS[f"{_head} {_tail}"] = ACUTE_CARDIOPULMONARY
for _head in ("osseous", "bony", "skeletal"):
    for _tail in ("abnormality", "abnormalities", "injury", "process", "lesion", "findings"):
        GROUPS[f"{_head} {_tail}"] = ("Fracture",)
for _tail in ("abnormality", "abnormalities", "process", "disease"):
    GROUPS[f"pleural {_tail}"] = _PLEURA
    GROUPS[f"lung {_tail}"] = _LUNGS
    GROUPS[f"pulmonary {_tail}"] = _LUNGS
    GROUPS[f"parenchymal {_tail}"] = _LUNGS

NORMAL_PHRASES = (
    "normal",
    "unremarkable",
    "within normal limits",
    "wnl",
    "normal in size",
    "normal size",
    "normal in appearance",
    "no finding",
    "no findings",
    "no abnormality",
    "no abnormalities",
    "no acute findings",
    "no acute finding",
)

Cue = Literal[
    "neg",
    "weakneg",
    "negpost",
    "pospost",
    "unc",
    "uncpost",
    "uncboth",
    "question",
    "history",
    "pseudo",
    "boundary",
    "and",
    "comma",
    "list",
    "or",
    "normal",
    "clear",
    "enlarged",
    "colon",
]

Category = Literal[
    "negation",
    "weak negation",
    "uncertainty",
    "question",
    "history",
    "affirmation",
    "pseudo",
    "termination",
]
Direction = Literal["forward", "backward", "either", "both", "none"]


class ContextRule(NamedTuple):
    """One row of the ConText lexicon: a trigger phrase and what it does to the findings near it.

    category: "negation" (a finding is absent), "weak negation" (a determiner, "no" / "not",
    whose reach over "and" is ambiguous), "uncertainty" (hedged: CheXpert's -1), "question"
    (a clinical question, "rule out X"), "history" (a past, not a current, finding), "affirmation"
    ("X is present"), "pseudo" (looks like a negation but is not: "no change in"), "termination"
    (ends a trigger's scope: "but", "however").
    direction: "forward" (the findings after it), "backward" (the finding before it; with none
    before, it reads forward: "resolved effusion"), "either" (forward, or backward when nothing
    follows in its clause: "not" in "pneumothorax is not", "unlikely"), "both" (the finding
    before it and those after: "effusion versus atelectasis"), "none" (pseudo and termination).
    source: where the trigger comes from (NegEx, ConText, the CheXpert labeler, NegBio, this
    project's earlier issues, or the IU X-ray reports read for issue 20).
    """

    trigger: str
    category: Category
    direction: Direction
    source: str


NEGEX = "NegEx (Chapman et al. 2001)"
CONTEXT = "ConText (Harkema et al. 2009)"
CHEXPERT = "CheXpert labeler (Irvin et al. 2019)"
NEGBIO = "NegBio (Peng et al. 2018)"
PROJECT = "project: radiologist phrasing (issues before 20)"
IU = "issue 20: IU X-ray reports and held-out phrasings"


def _rules(
    category: Category, direction: Direction, source: str, *triggers: str
) -> list[ContextRule]:
    return [ContextRule(trigger, category, direction, source) for trigger in triggers]


CONTEXT_RULES: tuple[ContextRule, ...] = (
    # --- negation, forward (prepositional cues carry over a coordinated list: "negative for A
    # and B"); "no" / "not" are determiners, below.
    *_rules("weak negation", "forward", NEGEX, "no", "but no", "but not", "and not", "nor any"),
    *_rules("weak negation", "either", NEGEX, "not"),
    *_rules(
        "negation",
        "forward",
        NEGEX,
        "without",
        "without any",
        "but without",
        "without evidence of",
        "with no evidence of",
        "no evidence of",
        "no evidence for",
        "no sign of",
        "no signs of",
        "free of",
        "negative for",
        "absence of",
        "neither",
        "no radiographic evidence of",
        "no radiographic signs of",
        "no findings of",
        "no findings to suggest",
    ),
    *_rules(
        "negation",
        "forward",
        PROJECT,
        "sans",
        "devoid of",
        "absent of",
        "non existent",
        "nonexistent",
        "clear of",
        "lack of",
        "lacking",
        "excluding",
        "exclude",
        "except",
        "other than",
        "rather than",
        "instead of",
        "does not show",
        "doesn t show",
        "not showing",
        "no features of",
        "resolution of",
        "interval resolution of",
        "no longer",
    ),
    *_rules("negation", "forward", PROJECT, "w o"),
    # --- negation, backward ("pneumothorax absent", "effusion has resolved")
    *_rules(
        "negation",
        "backward",
        NEGEX,
        "absent",
        "ruled out",
        "excluded",
        "not seen",
        "not present",
        "not identified",
        "not visualized",
        "not visualised",
        "is absent",
        "are absent",
        "negative",
        "not demonstrated",
        "not evident",
        "not appreciated",
        "not noted",
        "not detected",
    ),
    *_rules(
        "negation",
        "backward",
        PROJECT,
        "not visible",
        "resolved",
        "has resolved",
        "have resolved",
        "no longer present",
        "no longer visible",
        "is not seen",
        "are not seen",
        "is not present",
        "are not present",
        "none",
    ),
    *_rules(
        "negation",
        "backward",
        IU,
        "no longer seen",
        "is no longer seen",
        "are no longer seen",
        "no longer visualized",
        "no longer identified",
        "no longer evident",
        "no longer demonstrated",
        "no longer appreciated",
        "has cleared",
        "have cleared",
        "has resolved since",
    ),
    # --- uncertainty (CheXpert's -1)
    *_rules(
        "uncertainty",
        "forward",
        CHEXPERT,
        "possible",
        "possibly",
        "probable",
        "probably",
        "suspected",
        "suspicious for",
        "suspicion of",
        "suspicion for",
        "questionable",
        "question of",
        "may represent",
        "may reflect",
        "may be",
        "could be",
        "could represent",
        "might be",
        "might represent",
        "concerning for",
        "suggestive of",
        "suggesting",
        "suggests",
        "presumably",
        "presumed",
        "maybe",
        "perhaps",
        "cannot exclude",
        "cannot rule out",
        "can not exclude",
        "differential includes",
        "differential diagnosis includes",
        "no new",
        "suggest",
        "most likely",
        "more likely",
    ),
    *_rules("uncertainty", "either", CHEXPERT, "likely", "unlikely"),
    *_rules("uncertainty", "forward", PROJECT, "equivocal", "indeterminate"),
    *_rules(
        "uncertainty",
        "forward",
        IU,
        "borderline",
        "top normal",
        "upper limits of normal",
        "upper limit of normal",
        "at the upper limits of normal",
        "upper limits normal",
        "upper limit normal",
        "upper normal",
        "high normal",
        "upper limits of normal size",
        "favoring",
        "favor",
        "favored",
        "worrisome for",
        "raising the possibility of",
        "difficult to exclude",
        "vs",
        "no definite",
        "no convincing",
    ),
    *_rules("uncertainty", "both", CHEXPERT, "versus"),
    *_rules(
        "uncertainty",
        "backward",
        CHEXPERT,
        "cannot be excluded",
        "not excluded",
        "not ruled out",
        "cannot be ruled out",
    ),
    *_rules("uncertainty", "backward", IU, "can not be excluded", "not entirely excluded"),
    # --- questions (a clinical question is not a negation)
    *_rules("question", "forward", NEGEX, "rule out", "to rule out", "ruling out", "r o"),
    *_rules(
        "question",
        "forward",
        PROJECT,
        "evaluate for",
        "eval for",
        "assess for",
        "query",
        "?",
    ),
    # --- history: a past finding, not a current one
    *_rules("history", "forward", CONTEXT, "history of", "hx of", "past history of"),
    *_rules("history", "forward", IU, "status post", "known history of", "prior history of"),
    # --- affirmation after a finding ("nodule present") or before it ("positive for")
    *_rules(
        "affirmation",
        "backward",
        PROJECT,
        "present",
        "is present",
        "are present",
        "seen",
        "is seen",
        "are seen",
        "noted",
        "is noted",
        "are noted",
        "observed",
        "demonstrated",
        "redemonstrated",
        "again seen",
        "again noted",
        "persists",
        "identified",
        "is identified",
        "are identified",
    ),
    *_rules("affirmation", "backward", IU, "positive"),
    # --- pseudo-triggers: look like a negation, negate nothing ("no change in the effusion")
    *_rules(
        "pseudo",
        "none",
        NEGEX,
        "no change in",
        "no change of",
        "no increase in",
        "no increase of",
        "no significant change in",
        "no interval change in",
        "no interval change of",
        "no significant interval change in",
        "not only",
        "gram negative",
        "no suspicious change in",
    ),
    *_rules(
        "pseudo",
        "none",
        IU,
        "no interval increase in",
        "no significant increase in",
        "no decrease in",
        "no interval decrease in",
        "no substantial change in",
        "no appreciable change in",
        "no definite change in",
        "no change",
        "no interval change",
        "no significant change",
        "positive for",
        "without significant interval change of",
        "without interval change of",
        "without significant change of",
        "without change of",
        "without significant interval change in",
        "without interval change in",
        "without change in",
    ),
    # --- termination: ends a trigger's scope
    *_rules(
        "termination",
        "none",
        NEGEX,
        "but",
        "however",
        "although",
        "though",
        "aside from",
        "apart from",
        "which",
        "yet",
    ),
    *_rules("termination", "none", PROJECT, "with", "plus", "while", "whereas", "also"),
    *_rules("termination", "none", IU, "otherwise"),
)

# (category, direction) -> what the grammar of parser.py does with the trigger.
_GRAMMAR: dict[tuple[str, str], Cue] = {
    ("weak negation", "forward"): "weakneg",
    ("weak negation", "either"): "weakneg",
    ("negation", "forward"): "neg",
    ("negation", "backward"): "negpost",
    ("uncertainty", "forward"): "unc",
    ("uncertainty", "either"): "unc",
    ("uncertainty", "both"): "uncboth",
    ("uncertainty", "backward"): "uncpost",
    ("question", "forward"): "question",
    ("history", "forward"): "history",
    ("affirmation", "backward"): "pospost",
    ("pseudo", "none"): "pseudo",
    ("termination", "none"): "boundary",
}
# Triggers read backward when nothing they could scope over follows them in the clause.
EITHER_WAY: frozenset[str] = frozenset(r.trigger for r in CONTEXT_RULES if r.direction == "either")

CUES: dict[str, Cue] = {
    rule.trigger: _GRAMMAR[rule.category, rule.direction] for rule in CONTEXT_RULES
}
# Grammar, not ConText: sentence punctuation, coordination, and the structure predicates.
for _phrase in (".", ";"):
    CUES[_phrase] = "boundary"
CUES[":"] = "colon"  # ends the clause but keeps its finding for "Effusion: none"
CUES["and"] = "and"
CUES["as well as"] = "and"
for _phrase in ("nor", "/"):
    CUES[_phrase] = "list"
CUES[","] = "comma"
CUES["or"] = "or"
CUES["and or"] = "or"
for _phrase in NORMAL_PHRASES:
    CUES[_phrase] = "normal"
# Predicates that only mean "normal" about a structure ("lungs are clear", "costophrenic
# angles are sharp"); without one they are words not understood.
for _phrase in ("clear", "sharp", "intact", "not enlarged", "not widened", "well expanded"):
    CUES[_phrase] = "clear"
# Predicates that make a structure abnormal ("heart size is enlarged", "enlargement of the
# cardiac silhouette", "blunting of the left costophrenic angle"): STRUCTURE_ENLARGED says what.
for _phrase in (
    "enlarged",
    "widened",
    "increased in size",
    "enlargement",
    "enlargement of",
    "blunted",
    "blunting",
    "blunting of",
):
    CUES[_phrase] = "enlarged"

_STOP_TEXT = """a an the image images picture pictures radiograph radiographs film films x ray
    rays xray xrays cxr cxrs chest chests study studies scan scans exam exams case cases patient
    patients
    find show shows showing shown demonstrate demonstrates demonstrating me i want need search
    for of in on at to from that who whose where has have having had is are was were be
    been being there any some all both either evidence sign signs finding findings present seen
    visible identified appearance appearing features feature consistent compatible
    pattern left right bilateral bilaterally unilateral lower upper middle mid base bases basal
    apical apex lobe lobes zone zones lung lungs pulmonary pleural cardiac heart side sided
    mild mildly moderate moderately severe severely small large larger tiny trace minimal
    significant definite obvious new acute chronic old stable small moderate massive focal
    diffuse multifocal patchy subtle bibasilar retrocardiac perihilar hilar lateral frontal ap
    pa view views please can you do does cm mm now
    loculated layering residual persistent worsening worsened increasing increased improving
    improved decreasing decreased enlarging developing evolving interval associated underlying
    dependent subpulmonic streaky linear hazy spiculated calcified cavitary multiple several
    numerous scattered segmental subsegmental lobar unchanged stable again slight slightly
    extensive volume suspicious known prior previous previously
    rul rml rll lul lll lingula lingular hemithorax hemithoraces region regions area areas
    aspect portion portions recess field fields costophrenic angle angles both each either
    within along into over under above below posterior anterior medial distal proximal
    there it its this these those their they as by very quite place
    basilar bibasal infrahilar suprahilar paratracheal peripheral central dense densely
    confluent reticular reticulonodular increase decrease exacerbation progression improvement
    change changes development displaced nondisplaced healed healing first second third fourth
    fifth sixth seventh eighth ninth tenth eleventh twelfth rib clavicle clavicular scapula
    scapular humerus humeral vertebra vertebral vertebrae spine spinal thoracic lumbar body
    bodies adjacent amount component overall size mildly markedly marked portable placement
    wall keeping like plate st nd rd th minimally interstitial alveolar bronchogram
    bronchograms semi upright supine erect inspiration expiratory technique"""
# Descriptive words of the IU X-ray reports (issue 20) that sat next to a finding and left it
# open as a possible negation; none of them can negate or hedge ("vague nodule", "bandlike
# atelectasis", "crowding and atelectasis").
_REPORT_WORDS = """midlung vague crowding bandlike platelike calcific prominent tissue projecting
    developed defined early nodular sized segment calcifications irregular partial superior
    biapical compressive recurrent continued rounded lobulated subpleural coarse circumscribed
    ovoid masslike uncalcified predominantly few measuring approximately throughout involving
    appear appears due than secondary causing greater greatest space part one two given
    relatively complete combination fibronodular visualized redemonstration correlate better
    collection only"""
STOP_WORDS: frozenset[str] = frozenset(_STOP_TEXT.split()) | frozenset(_REPORT_WORDS.split())

UNIT_AFTER_NUMBER = frozenset({"cm", "mm"})
MAX_PHRASE = max(len(p.split()) for p in [*FINDING_PHRASES, *CUES, *STRUCTURES, *GROUPS])
