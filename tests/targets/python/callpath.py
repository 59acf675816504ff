"""top -> mid -> leaf, with leaf burning CPU in its loop."""

from _common import native_id, ready, running


def leaf():
    x = 0
    while running():  # leaf-loop
        x += 1  # leaf-loop
    return x


def mid():
    return leaf()  # call-leaf


def top():
    return mid()  # call-mid


ready(tid=native_id())
top()
