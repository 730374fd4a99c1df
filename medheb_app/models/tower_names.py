"""The frozen towers' identity (architecture, input size, text width, licence), without torch:
what a checkpoint's card records. models/towers.py builds the towers themselves."""

IMAGE_ARCH = "tf_efficientnet_lite0"
IMAGE_SIZE = 224
TEXT_DIM = 384
TOWERS_LICENSE = "Apache-2.0"
