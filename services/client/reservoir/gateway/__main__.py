from .command import main

main()
