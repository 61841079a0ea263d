module quickstart

go 1.19

require ckpt.dev/ckpt v0.0.0

replace ckpt.dev/ckpt => ../ckpt
