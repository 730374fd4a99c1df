"""The query parser's lexicon: finding phrases, logic cues and stop words.

Phrase lists follow the CheXpert labeler's mention lists where it has one (Irvin et al. 2019),
plus the abbreviations radiologists type (PTX, PNA, CHF, CM, fx). Data only; the grammar that
uses it lives in parser.py.
"""

from __future__ import annotations

from typing import Literal

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
    "large heart",
    "cm",
)
_add(
    "Consolidation",
    "consolidation",
    "consolidations",
    "consolidated",
    "airspace consolidation",
    "air space consolidation",
    "lobar consolidation",
)
_add(
    "Edema",
    "edema",
    "oedema",
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
    "Lung Lesion",
    "lung lesion",
    "lung lesions",
    "lesion",
    "lesions",
    "nodule",
    "nodules",
    "nodular opacity",
    "nodular density",
    "pulmonary nodule",
    "lung nodule",
    "mass",
    "masses",
    "lung mass",
    "pulmonary mass",
    "tumor",
    "tumour",
    "neoplasm",
    "carcinoma",
    "lung cancer",
    "cancer",
    "malignancy",
    "spn",
    "coin lesion",
)
_add(
    "Lung Opacity",
    "lung opacity",
    "lung opacities",
    "opacity",
    "opacities",
    "opacification",
    "infiltrate",
    "infiltrates",
    "infiltration",
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
    "tube",
    "tubes",
    "line",
    "lines",
    "catheter",
    "pacemaker",
    "device",
    "devices",
)
_add(
    "Enlarged Cardiomediastinum",
    "enlarged cardiomediastinum",
    "widened mediastinum",
    "mediastinal widening",
)
_add("Pleural Other", "pleural thickening", "pleural plaque", "pleural plaques", "pleural other")

NORMAL_PHRASES = (
    "normal",
    "unremarkable",
    "no finding",
    "no findings",
    "no abnormality",
    "no abnormalities",
    "no acute findings",
    "no acute finding",
)

Cue = Literal[
    "neg",
    "negpost",
    "pospost",
    "unc",
    "uncpost",
    "question",
    "boundary",
    "and",
    "comma",
    "list",
    "or",
    "normal",
]
CUES: dict[str, Cue] = {}
for _phrase in (
    "no",
    "not",
    "without",
    "without any",
    "w o",
    "but not",
    "but no",
    "but without",
    "and not",
    "no evidence of",
    "no evidence for",
    "no sign of",
    "no signs of",
    "no radiographic evidence of",
    "free of",
    "clear of",
    "negative for",
    "absence of",
    "lack of",
    "lacking",
    "neither",
    "excluding",
    "exclude",
    "except",
    "other than",
    "rather than",
    "instead of",
    "does not show",
    "doesn t show",
    "not showing",
):
    CUES[_phrase] = "neg"
for _phrase in (
    "absent",
    "ruled out",
    "excluded",
    "not seen",
    "not present",
    "not identified",
    "not visible",
    "not visualized",
    "not visualised",
    "is absent",
    "are absent",
    "negative",
    "resolved",
):
    CUES[_phrase] = "negpost"
for _phrase in (
    "possible",
    "possibly",
    "probable",
    "probably",
    "suspected",
    "suspicious for",
    "suspicion of",
    "questionable",
    "question of",
    "cannot exclude",
    "cannot rule out",
    "can not exclude",
    "may represent",
    "concerning for",
    "borderline",
):
    CUES[_phrase] = "unc"
for _phrase in ("cannot be excluded", "not excluded", "not ruled out", "cannot be ruled out"):
    CUES[_phrase] = "uncpost"
for _phrase in (
    "rule out",
    "to rule out",
    "ruling out",
    "r o",
    "evaluate for",
    "eval for",
    "assess for",
    "query",
    "?",
):
    CUES[_phrase] = "question"
for _phrase in ("but", "with", "plus", "yet", "however", "although", "while", "whereas", "also"):
    CUES[_phrase] = "boundary"
for _phrase in (".", ";", ":"):
    CUES[_phrase] = "boundary"
CUES["and"] = "and"
CUES["as well as"] = "and"
for _phrase in ("nor", "/"):
    CUES[_phrase] = "list"
CUES[","] = "comma"
for _phrase in ("present", "is present", "are present", "seen", "is seen", "are seen"):
    CUES[_phrase] = "pospost"
CUES["or"] = "or"
CUES["and or"] = "or"
for _phrase in NORMAL_PHRASES:
    CUES[_phrase] = "normal"

_STOP_TEXT = """a an the image images picture pictures radiograph radiographs film films x ray
    rays xray xrays cxr cxrs chest chests study studies scan scans exam exams case cases patient
    patients
    find show shows showing shown demonstrate demonstrates demonstrating me i want need search
    for of in on at to from that which who whose where has have having had is are was were be
    been being there any some all both either evidence sign signs finding findings present seen
    visible identified appearance appearing features feature consistent compatible
    pattern left right bilateral bilaterally unilateral lower upper middle mid base bases basal
    apical apex lobe lobes zone zones lung lungs pulmonary pleural cardiac heart side sided
    mild mildly moderate moderately severe severely small large larger tiny trace minimal
    significant definite obvious new acute chronic old stable small moderate massive focal
    diffuse multifocal patchy subtle bibasilar retrocardiac perihilar hilar lateral frontal ap
    pa view views please can you do does cm mm"""
STOP_WORDS: frozenset[str] = frozenset(_STOP_TEXT.split())

UNIT_AFTER_NUMBER = frozenset({"cm", "mm"})
MAX_PHRASE = max(len(p.split()) for p in [*FINDING_PHRASES, *CUES])
