module 0.kollect.dev/earlyinit

go 1.26.0
