from hora.cost_model.cli import main

main()
