module ckpt.dev/ckpt

go 1.19
