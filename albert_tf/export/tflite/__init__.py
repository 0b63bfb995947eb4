"""TFLite files: conversion with its parity figures (`converter`), the tied embedding table of a
calibrated int8 model stored once (`tied_table`), and the metadata on-device clients read
(`metadata`: the flatbuffer; `app_metadata`: what each head's files carry)."""
