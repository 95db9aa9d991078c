module nullext

go 1.24
